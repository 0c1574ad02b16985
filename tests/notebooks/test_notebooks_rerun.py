"""Every notebook passes again in the same data folder, in a fresh kernel.

Notebooks are experiments people re-run: nbval runs each notebook once (``notebooks/`` is a test
path), then this test runs it a second time in a new kernel (as after a kernel restart) against
the same ``$TOOLKIT_DATA_DIR``, whose server still holds the first run's models, jobs and traces.
The root ``conftest.py`` moves it behind the notebooks. A notebook that nbval does not run in this
session (e.g. ``pytest tests/notebooks``) is run twice here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from notebook_support import NOTEBOOKS, run_notebook


def test_the_notebooks_are_found() -> None:
    assert NOTEBOOKS and all(p.name[:2].isdigit() for p in NOTEBOOKS), NOTEBOOKS


@pytest.mark.slow
@pytest.mark.after_notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_passes_when_run_again(path: Path, notebooks_run_by_nbval: frozenset[Path]) -> None:
    for _ in range(1 if path in notebooks_run_by_nbval else 2):
        run_notebook(path)
