"""A seeded notebook run twice gives the same trajectories (token ids, texts, rewards of everything the
server stored: logged and trained on) and byte-identical checkpoints (sha256 of every weight file of
every step): first in a fresh data folder (a new local server), then again in the same folder against
the same server, which still holds the first run's models, jobs and prefix cache.

The second run is also the notebook's re-run (tests/notebooks/test_notebooks_rerun.py makes the others'):
a new kernel of the user's python (``user_extras.user_venv``), no third-party warning in any cell, each
widget's static copy in the export. Both runs are quick passes (``TOOLKIT_NOTEBOOK_QUICK=1``) with
torch on one thread (``TOOLKIT_TORCH_THREADS=1``; docs/training.md, "What is bit for bit", says what
changes with the thread count). ``SEEDED`` lists the notebooks with a ``SEED`` that drives their run
(03, 07 and 10; 10 sets no flag beyond its seeds: a seeded job recomputes its old logprobs by default).
The runs use a data folder of their own, not the session's, so this file stays out of the notebook
group that ``conftest.py`` keeps on one worker.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import toolkit as tk
from support.notebook_support import SEEDED, check_second_run, run_notebook


def fingerprint(folder: Path) -> dict[str, Any]:
    """What a run left in its data folder: per model (in creation order), each checkpoint's weight
    files' digests and every stored trajectory's (step, split, group, index, tokens, texts, reward).
    A group is its place among the model's groups: the server numbers groups across all models."""
    info = json.loads((folder / "server.json").read_text())
    key = (folder / "local.key").read_text().strip()
    models: list[dict[str, Any]] = []
    with tk.Client(info["url"], key) as client:
        for model in sorted(client.models.list(), key=lambda m: str(m.created_at)):
            root = folder / "checkpoints" / model.id
            steps = {
                step.name: {
                    f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                    for f in sorted(step.glob("*.safetensors"))
                }
                for step in sorted(root.glob("step*"))
            }
            trajectories = client.models.trajectories(model.id, limit=1000)
            groups = {g: i for i, g in enumerate(sorted({t.group_id for t in trajectories}))}
            stored = [
                (
                    t.step,
                    t.split,
                    groups[t.group_id],
                    t.index,
                    [c.token_ids for c in t.trajectory.choices()],
                    [c.message.content for c in t.trajectory.choices()],
                    t.reward,
                )
                for t in trajectories
            ]
            models.append(
                {"base": model.base_model, "checkpoints": steps, "trajectories": sorted(stored, key=repr)}
            )
    return {"models": models}


@pytest.mark.slow
@pytest.mark.parametrize("path", SEEDED, ids=lambda p: p.stem)
def test_a_seeded_notebook_repeats_in_a_fresh_data_folder_and_again_in_it(
    path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    user_python: Path,
    stop_servers: Callable[[Path], None],
) -> None:
    monkeypatch.setenv("TOOLKIT_NOTEBOOK_QUICK", "1")
    monkeypatch.setenv("TOOLKIT_TORCH_THREADS", "1")
    monkeypatch.setenv("TOOLKIT_DATA_DIR", str(tmp_path))
    try:
        run_notebook(path)
        first = fingerprint(tmp_path)["models"]
        check_second_run(run_notebook(path, python=user_python))
        both = fingerprint(tmp_path)["models"]
    finally:
        stop_servers(tmp_path)
    second = both[len(first) :]  # the models the second run created, in creation order
    assert both[: len(first)] == first  # the second run changed nothing of the first's
    trained = [m for m in first if len(m["checkpoints"]) > 1]
    assert trained and all(m["trajectories"] for m in trained)  # something was sampled and trained
    assert [m["checkpoints"] for m in second] == [m["checkpoints"] for m in first]
    assert second == first
