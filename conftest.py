"""Session-wide set-up shared by tests/ and notebooks/ (nbval).

Notebooks call ``tk.connect()`` with no configuration, which starts the local server of
``$TOOLKIT_DATA_DIR``. Point that at a temporary folder for the test session and stop the server
it started at the end (and any a notebook started in a folder inside it), so no test run leaves a
server behind or touches ``~/.toolkit``.

The notebooks (nbval) and tests/notebooks/ run first, as one group, with the tests marked
``after_notebooks`` (the notebook re-run) at its end, so they find the data folder that nbval's run
of the notebooks left behind. Under pytest-xdist (``-n 2``, what ``scripts/test`` runs) that group
goes to one worker and each other test file is a group of its own (its module fixtures set up
once); each worker has its own ``$TOOLKIT_DATA_DIR`` and session server, and torch runs on one
thread in each worker and in each server it starts (``$TOOLKIT_TORCH_THREADS``).
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
    # the real model is fetched and converted once per machine, not per session (scripts/test sets the same)
    os.environ.setdefault("TOOLKIT_MODEL_CACHE", str(Path(__file__).parent / ".cache" / "models"))
    # A notebook whose full run is longer than the suite can afford (11: SmolLM2 over three seeds, most
    # of an hour) runs at its small size in every pass here (about four minutes on 2 busy cores); its
    # learning checks are asserted by its full run only. Notebooks that read no size are unaffected.
    os.environ.setdefault("TOOLKIT_NOTEBOOK_SIZE", "small")
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        # Each worker and each server it starts runs torch on one thread: two processes spinning
        # two threads each on two cores slowed notebook 02's SFT cell from 54 s to 350 s.
        for name in ("TOOLKIT_TORCH_THREADS", "OMP_NUM_THREADS"):
            os.environ.setdefault(name, "1")


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = getattr(config, _DATA_DIR, None)
    if folder is None:
        return
    for announced in Path(folder).rglob("server.json"):  # nested: servers a notebook started (08)
        with suppress(FileNotFoundError, ValueError, KeyError, ProcessLookupError):
            os.kill(int(json.loads(announced.read_text())["pid"]), signal.SIGTERM)


def _after_notebooks(item: pytest.Item) -> bool:
    return item.get_closest_marker("after_notebooks") is not None


def _in_notebook_group(item: pytest.Item) -> bool:
    return _group(item.nodeid) == "notebooks"


def _group(nodeid: str) -> str:
    """The worker group of a test under xdist: the notebook group, else the test's file."""
    path = nodeid.split("::")[0]
    return "notebooks" if path.startswith(("notebooks/", "tests/notebooks/")) else path


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Whole groups (``_group``) to one worker at a time, in collection order. (xdist's own
    ``--dist loadgroup`` renames node ids, which pytest 9 no longer lets it do.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid)

    return ByGroup(config, log)  # type: ignore[arg-type]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[_NBVAL_NOTEBOOKS] = frozenset(item.path for item in items if item.path.suffix == ".ipynb")
    # stable: the notebook group first (its re-run last), the rest in collection order
    items.sort(key=lambda item: (not _in_notebook_group(item), _after_notebooks(item)))


@pytest.fixture(scope="session")
def notebooks_run_by_nbval(pytestconfig: pytest.Config) -> frozenset[Path]:
    """The notebooks nbval runs in this session (before any ``after_notebooks`` test)."""
    return pytestconfig.stash.get(_NBVAL_NOTEBOOKS, frozenset())
