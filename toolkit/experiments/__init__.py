"""Reproducible experiments: ``tk.experiment`` records a run and links what it creates,
``Experiment.export`` writes it to one JSON file, ``tk.load_experiment`` reads it back and
``tk.replay`` runs its jobs again and compares every checkpoint with its record."""

from .experiment import Experiment, ExperimentFileError, experiment, load_experiment
from .replay import Divergence, ReplayReport, ReplayRow, replay

__all__ = [
    "Divergence",
    "Experiment",
    "ExperimentFileError",
    "ReplayReport",
    "ReplayRow",
    "experiment",
    "load_experiment",
    "replay",
]
