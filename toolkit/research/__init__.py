"""Research on trajectories: export and import, best-of-group SFT, re-scoring, evaluation."""
