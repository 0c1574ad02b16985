"""A Jupyter-centric toolkit for fine-tuning LLM agents with RL and SFT.

``import toolkit as tk; client = tk.connect()`` gives a client of the training API, the chat
endpoint and the trace service: the embedded local server by default, any deployment by
environment or arguments.
"""

import importlib
from typing import Any

from . import _html
from ._version import __version__
from .client import (
    AsyncClient,
    Client,
    DuplicateTrainingJob,
    TrainingJobFailed,
    TrainingJobInterrupted,
    TrainingJobWarning,
    UnsupportedOperation,
    connect,
    connect_async,
)

_html.install()  # rich HTML reprs of jobs, checkpoints, groups, completions and calls in Jupyter
_LAZY = ("widgets", "frames", "plots", "tracing", "research", "experiments", "tracking")
_LAZY_NAMES = {
    "GatherError": "rollouts",
    "GatherWarning": "rollouts",
    "experiment": "experiments",
    "load_experiment": "experiments",
    "replay": "experiments",
}


def __getattr__(name: str) -> Any:
    """``tk.widgets``, ``tk.frames``, ``tk.plots``, ``tk.tracing``, ``tk.research``, ``tk.experiments``
    and ``tk.tracking`` load on first use, as do ``tk.GatherError`` and ``tk.GatherWarning`` (from
    :mod:`toolkit.rollouts`) and ``tk.experiment``, ``tk.load_experiment``, ``tk.replay`` (from
    :mod:`toolkit.experiments`)."""
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module(f".{_LAZY_NAMES[name]}", __name__), name)
    raise AttributeError(f"module 'toolkit' has no attribute {name!r}")


__all__ = [
    "AsyncClient",
    "Client",
    "DuplicateTrainingJob",
    "GatherError",
    "GatherWarning",
    "TrainingJobFailed",
    "TrainingJobInterrupted",
    "TrainingJobWarning",
    "UnsupportedOperation",
    "__version__",
    "connect",
    "connect_async",
    "experiment",
    "experiments",
    "frames",
    "load_experiment",
    "plots",
    "replay",
    "research",
    "tracing",
    "tracking",
    "widgets",
]
