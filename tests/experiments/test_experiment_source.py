"""What ``tk.experiment`` records of where it runs: a script's path, its git commit and whether the
tree is dirty (a changed tracked file or an untracked one; None outside a repository), the notebook
Jupyter names, and the default seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import toolkit as tk
from toolkit import seeding

SCRIPT = """
import json, toolkit as tk
exp = tk.experiment("e", seed=5)
print(json.dumps(exp.source.model_dump()))
"""


def run_script(folder: Path) -> dict[str, object]:
    script = folder / "run.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(tk.__file__).parent.parent)}
    env.pop("JPY_SESSION_NAME", None)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def git(folder: Path, *args: str) -> str:
    command = ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@example.com", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def test_a_script_in_a_repository_records_its_commit_and_dirty_flag(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text("ignored.txt\n")
    (tmp_path / "notes.txt").write_text("a\n")
    (tmp_path / "run.py").write_text(SCRIPT)
    git(tmp_path, "add", ".gitignore", "notes.txt", "run.py")
    git(tmp_path, "commit", "-q", "-m", "first")
    commit = git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "ignored.txt").write_text("ignored files are not the run's source\n")
    clean = run_script(tmp_path)
    (tmp_path / "notes.txt").write_text("b\n")
    changed = run_script(tmp_path)
    git(tmp_path, "checkout", "-q", "notes.txt")
    (tmp_path / "study.py").write_text("# not committed yet\n")
    untracked = run_script(tmp_path)
    path = str((tmp_path / "run.py").resolve())
    assert clean == {"path": path, "kind": "script", "git_commit": commit, "git_dirty": False}
    assert changed == untracked == {**clean, "git_dirty": True}


def test_outside_a_repository_the_git_state_is_none(tmp_path: Path) -> None:
    got = run_script(tmp_path)
    assert (got["kind"], got["git_commit"], got["git_dirty"]) == ("script", None, None)


def test_in_jupyter_the_notebook_is_the_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JPY_SESSION_NAME", str(tmp_path / "study.ipynb"))
    exp = tk.experiment("e", seed=1)
    assert (exp.source.path, exp.source.kind) == (str(tmp_path / "study.ipynb"), "notebook")


def test_the_seed_is_the_default_only_inside_the_experiment() -> None:
    with tk.experiment("e", seed=11) as exp:
        assert seeding.default_seed() == 11
        with tk.experiment("inner", seed=12):
            assert seeding.default_seed() == 12
        assert seeding.default_seed() == 11
    assert seeding.default_seed() is None and repr(exp) == "Experiment('e', seed=11, models=0, jobs=0)"


def test_a_file_of_a_newer_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.json"
    path.write_text(json.dumps({"format_version": 99, "name": "e"}))
    with pytest.raises(ValueError, match=r"written by a newer toolkit \(format_version 99; "):
        tk.load_experiment(path)


def test_start_and_stop_open_it_without_a_with_block() -> None:
    exp = tk.experiment("cells", seed=7).start()
    assert seeding.default_seed() == 7
    exp.stop()
    assert seeding.default_seed() is None
