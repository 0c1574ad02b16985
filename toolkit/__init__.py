"""A Jupyter-centric toolkit for fine-tuning LLM agents with RL and SFT.

``import toolkit as tk; client = tk.connect()`` gives a client of the training API, the chat
endpoint and the trace service: the embedded local server by default, any deployment by
environment or arguments.
"""

import importlib
from types import ModuleType

from . import _html
from ._version import __version__
from .client import (
    AsyncClient,
    Client,
    TrainingJobFailed,
    TrainingJobInterrupted,
    TrainingJobWarning,
    UnsupportedOperation,
    connect,
    connect_async,
)

_html.install()  # rich HTML reprs of jobs, checkpoints, groups, completions and calls in Jupyter
_LAZY = ("widgets", "frames", "plots", "tracing", "research", "tracking")


def __getattr__(name: str) -> ModuleType:
    """``tk.widgets``, ``tk.frames``, ``tk.plots``, ``tk.tracing``, ``tk.research`` and ``tk.tracking``
    load on first use."""
    if name in _LAZY:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'toolkit' has no attribute {name!r}")


__all__ = [
    "AsyncClient",
    "Client",
    "TrainingJobFailed",
    "TrainingJobInterrupted",
    "TrainingJobWarning",
    "UnsupportedOperation",
    "__version__",
    "connect",
    "connect_async",
    "frames",
    "plots",
    "research",
    "tracing",
    "tracking",
    "widgets",
]
