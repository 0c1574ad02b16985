"""The trainer: RL and SFT losses, the gradient-step loops and the job runner."""
