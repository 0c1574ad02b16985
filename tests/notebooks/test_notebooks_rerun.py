"""Every notebook passes again in the same data folder, in a fresh kernel.

Notebooks are experiments people re-run: nbval runs each notebook once (``notebooks/`` is a test path),
then this test runs it a second time in a new kernel (as after a kernel restart) against the same
``$TOOLKIT_DATA_DIR``, whose server still holds the first run's models, jobs and traces. The root
``conftest.py`` runs it right after nbval's run of the same notebook, on the same worker. A notebook
that nbval does not run in this session (e.g. ``pytest tests/notebooks``) is run twice here. The re-run
is a quick pass (``TOOLKIT_NOTEBOOK_QUICK=1``: a few training steps, no learning checks): what it checks
is that names, files and servers of the first run do not get in the way; nbval's run checks the
learning (07 and 11 run at their small size in the suite: their full runs check theirs). The
re-run's kernel is a python that sees only what ``scripts/lab`` installs (the project with its user
extras, not the ``dev`` extra of the suite: ``user_extras.user_venv``), so a notebook that
imports a test tool fails here as it would for a user. No cell shows a third-party warning (an
error-pink box the notebook's reader can do nothing about). The seeded notebooks (``SEEDED``) make
their second run in tests/reproducibility, which checks the same and that it repeats the first.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat
import pytest
from support.notebook_support import (
    NOTEBOOKS,
    SEEDED,
    STATIC_WIDGETS,
    check_second_run,
    run_notebook,
    third_party_warnings,
)


def test_the_notebooks_are_found() -> None:
    assert NOTEBOOKS and all(p.name[:2].isdigit() for p in NOTEBOOKS), NOTEBOOKS


def test_each_notebook_runs_with_its_rerun_in_one_group_and_the_notebooks_first(
    request: pytest.FixtureRequest,
) -> None:
    """The root conftest.py: a notebook's nbval run and its re-run form one group (under xdist on one
    worker, one data folder; 04 with 03, whose model it reads), the re-run after the cells, and the
    notebook groups run before every other test, the longest first."""
    root_conftest = Path(__file__).resolve().parents[2] / "conftest.py"
    (plugin,) = [
        p
        for p in request.config.pluginmanager.get_plugins()
        if getattr(p, "__file__", "") == str(root_conftest)
    ]
    items = request.session.items
    groups = [plugin._group(item.nodeid) for item in items]
    size = sum(g.startswith("notebooks/") for g in groups)
    assert all(g.startswith("notebooks/") for g in groups[:size])
    rerun = "tests/notebooks/test_notebooks_rerun.py::test_notebook_passes_when_run_again"
    named = [
        f"{rerun}[09_research]",
        "notebooks/04_comparing_checkpoints.ipynb::Cell 2",
        f"{rerun}[04_comparing_checkpoints]",
    ]
    assert [plugin._group(n) for n in named] == ["notebooks/09_research", *["notebooks/03_rl_loop"] * 2]
    assert all(g == item.nodeid.split("::")[0] for g, item in zip(groups[size:], items[size:]))
    runs = {g: [i for i, h in enumerate(groups) if h == g] for g in dict.fromkeys(groups[:size])}
    assert all(b - a == 1 for span in runs.values() for a, b in zip(span, span[1:]))  # each group in one run
    for stem in (p.stem for p in NOTEBOOKS):
        cells = [i for i, item in enumerate(items) if item.nodeid.startswith(f"notebooks/{stem}.ipynb::")]
        reruns = [i for i, item in enumerate(items) if item.nodeid.endswith(f"run_again[{stem}]")]
        group = "notebooks/03_rl_loop" if stem == "04_comparing_checkpoints" else f"notebooks/{stem}"
        assert {groups[i] for i in cells + reruns} <= {group}
        assert all(i < j for i in cells for j in reruns)
    if "notebooks/11_real_model_agent" in runs:
        assert list(runs)[0] == "notebooks/11_real_model_agent"


def test_the_user_python_sees_the_user_extras_only(user_python: Path) -> None:
    probe = "import importlib.util as u; print([bool(u.find_spec(m)) for m in ('toolkit.server', 'openai', 'pytest')])"
    out = subprocess.run([user_python, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[True, True, False]"


@pytest.mark.slow
@pytest.mark.after_notebooks
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p not in SEEDED], ids=lambda p: p.stem)
def test_notebook_passes_when_run_again(
    path: Path, notebooks_run_by_nbval: frozenset[Path], monkeypatch: pytest.MonkeyPatch, user_python: Path
) -> None:
    monkeypatch.setenv("TOOLKIT_NOTEBOOK_QUICK", "1")
    for _ in range(1 if path in notebooks_run_by_nbval else 2):
        executed = run_notebook(path, python=user_python)
    shown = check_second_run(executed)
    if path.stem == "09_research":  # the research views, each readable in the export
        assert shown == STATIC_WIDGETS


def test_third_party_warnings_are_found_in_a_cells_stderr() -> None:
    text = (
        "/x/site-packages/transformers/modeling_utils.py:3312: FutureWarning: `is_gradient_checkpointing` is"
        " deprecated\n  warnings.warn(\n/work/toolkit/client/jobs.py:80: TrainingJobWarning: nothing trained\n"
    )
    stderr = nbformat.v4.new_output("stream", name="stderr", text=text)
    cell = nbformat.v4.new_code_cell(
        "x", outputs=[stderr, nbformat.v4.new_output("stream", name="stdout", text=text)]
    )
    found = third_party_warnings(nbformat.v4.new_notebook(cells=[cell]))
    assert found == ["cell 0: /x/site-packages/transformers/modeling_utils.py:3312: FutureWarning: "]
