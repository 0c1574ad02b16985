"""Session-wide set-up shared by tests/ and notebooks/ (nbval).

Notebooks call ``tk.connect()`` with no configuration, which starts the local server of
``$TOOLKIT_DATA_DIR``. Point that at a temporary folder for the test session and stop the server
it started at the end (and any a notebook started in a folder inside it), so no test run leaves a
server behind or touches ``~/.toolkit``.

Tests marked ``after_notebooks`` (the notebook re-run) are moved behind every other item, so they
find the data folder that nbval's run of the notebooks left behind.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from contextlib import suppress
from pathlib import Path

import pytest

_DATA_DIR = "_toolkit_session_data_dir"
_NBVAL_NOTEBOOKS = pytest.StashKey[frozenset[Path]]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "after_notebooks: runs after the notebooks (nbval) of the session")
    folder = tempfile.mkdtemp(prefix="toolkit-session-")
    os.environ["TOOLKIT_DATA_DIR"] = folder
    for name in (
        "TOOLKIT_BASE_URL",
        "TOOLKIT_API_KEY",
        "TOOLKIT_PRESET",
        "TOOLKIT_INFERENCE_URL",
        "TOOLKIT_TRACE_URL",
        # notebook 06 reaches the hosted services only when asked to
        *(() if os.environ.get("TOOLKIT_TEST_HOSTED") else ("WANDB_API_KEY",)),
    ):
        os.environ.pop(name, None)
    setattr(config, _DATA_DIR, folder)


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = getattr(config, _DATA_DIR, None)
    if folder is None:
        return
    for announced in Path(folder).rglob("server.json"):  # nested: servers a notebook started (08)
        with suppress(FileNotFoundError, ValueError, KeyError, ProcessLookupError):
            os.kill(int(json.loads(announced.read_text())["pid"]), signal.SIGTERM)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[_NBVAL_NOTEBOOKS] = frozenset(item.path for item in items if item.path.suffix == ".ipynb")
    items.sort(key=lambda item: item.get_closest_marker("after_notebooks") is not None)  # stable


@pytest.fixture(scope="session")
def notebooks_run_by_nbval(pytestconfig: pytest.Config) -> frozenset[Path]:
    """The notebooks nbval runs in this session (before any ``after_notebooks`` test)."""
    return pytestconfig.stash.get(_NBVAL_NOTEBOOKS, frozenset())
