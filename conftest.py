"""Session-wide set-up shared by tests/ and notebooks/ (nbval).

Notebooks call ``tk.connect()`` with no configuration, which starts the local server of
``$TOOLKIT_DATA_DIR``. Point that at a temporary folder for the test session; at the end stop the
server it started (and any a notebook started in a folder inside it) and remove the folder, so no
test run leaves a server or its data behind (about 340 MB a run) or touches ``~/.toolkit``.

Each notebook's nbval run and its re-run (the test marked ``after_notebooks``) form one group, run
first, the re-run at its end, so it finds the data folder that nbval's run left behind; notebook 04,
which compares the checkpoints of notebook 03's model, is in 03's group. Under pytest-xdist (``-n 2``,
what ``scripts/test`` runs) each group goes to one worker, the longest notebooks first, and each other
test file is a group of its own (its module fixtures set up once); each worker has its own
``$TOOLKIT_DATA_DIR`` and session server, and torch runs on one thread in each worker and in each
server it starts (``$TOOLKIT_TORCH_THREADS``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
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
    # The notebooks whose full run is longer than the suite can afford (07: the agent recipe on the 1M
    # model, about 5 minutes of a busy core; 11: SmolLM2 over three seeds, most of an hour) run at their
    # small size in every pass here (half a minute and a minute and a half); their learning checks are
    # asserted by their full runs only (TOOLKIT_NOTEBOOK_SIZE=full). Notebooks that read no size are
    # unaffected.
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
    _stop_servers(Path(folder))
    shutil.rmtree(folder, ignore_errors=True)


def _stop_servers(folder: Path) -> None:
    """Stop every server announced in ``folder`` or a folder inside it (servers a notebook started,
    as 08 and 11 do) and wait until each has ended."""
    from toolkit.client.local_server import stop

    for announced in sorted(folder.rglob("server.json")):
        with suppress(OSError, ValueError, KeyError, TimeoutError):
            stop(announced.parent)


@pytest.fixture
def stop_servers() -> Callable[[Path], None]:
    """Stops every server announced in a folder or a folder inside it, waiting until each has ended."""
    return _stop_servers


def _after_notebooks(item: pytest.Item) -> bool:
    return item.get_closest_marker("after_notebooks") is not None


RERUN = "tests/notebooks/test_notebooks_rerun.py::test_notebook_passes_when_run_again["
# The notebooks that take longest in the suite, started first so that the two workers end together
# (11 with its re-run: over 3 minutes on a busy core; 03 with 04; 09; 02); the others follow in name order.
LONGEST_FIRST = ("11_real_model_agent", "03_rl_loop", "09_research", "02_supervised_fine_tuning")
SAME_FOLDER = {"04_comparing_checkpoints": "03_rl_loop"}  # 04 compares the checkpoints of 03's model


def _group(nodeid: str) -> str:
    """The worker group of a test under xdist: a notebook with its re-run, else the test's file."""
    path = nodeid.split("::")[0]
    if path.startswith("notebooks/"):
        stem = Path(path).stem
    elif nodeid.startswith(RERUN):
        stem = nodeid[len(RERUN) :].rstrip("]")
    else:
        return path
    return f"notebooks/{SAME_FOLDER.get(stem, stem)}"


def _rank(item: pytest.Item) -> tuple[int, str, bool]:
    """Where a test runs in the session: the notebook groups first, longest first, each notebook's
    re-run after its nbval run; every other test after them, in collection order."""
    group = _group(item.nodeid)
    if not group.startswith("notebooks/"):
        return (1, "", False)
    stem = group.removeprefix("notebooks/")
    order = LONGEST_FIRST.index(stem) if stem in LONGEST_FIRST else len(LONGEST_FIRST)
    return (0, f"{order:02d} {stem}", _after_notebooks(item))


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
    items.sort(key=_rank)  # stable: within a rank, collection order


@pytest.fixture(scope="session")
def notebooks_run_by_nbval(pytestconfig: pytest.Config) -> frozenset[Path]:
    """The notebooks nbval runs in this session (before any ``after_notebooks`` test)."""
    return pytestconfig.stash.get(_NBVAL_NOTEBOOKS, frozenset())
