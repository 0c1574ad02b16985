"""Packaging and the two commands: what pyproject.toml declares, the wheel it builds, and what
``scripts/lab`` and ``scripts/test`` install and run (with stand-ins for python, pip and the tools)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_client_and_widgets_are_the_core_install() -> None:
    core = {d.split(">")[0].split("=")[0] for d in PROJECT["dependencies"]}
    assert core == {"httpx", "pydantic", "pandas", "plotly", "anywidget", "ipywidgets", "tqdm", "filelock"}
    extras = PROJECT["optional-dependencies"]
    assert {"fastapi", "uvicorn", "torch"} <= {d.split(">")[0] for d in extras["server"]}
    assert extras["lab"][0] == "jupyterlab>=4.2" and "openai>=1.50" in extras["lab"]  # notebook 07
    assert any(d.startswith("import-linter") for d in extras["dev"])


def test_wheel_has_an_spdx_license_and_no_deprecation(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, tree / name)
    shutil.copytree(ROOT / "toolkit", tree / "toolkit", ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", "dist", "."],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "deprecated" not in out.stdout + out.stderr
    (wheel,) = (tree / "dist").glob("rl_notebook_toolkit-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "Requires-Dist: filelock>=3.12" in metadata.splitlines()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "toolkit/server/__init__.py" in names and "toolkit/py.typed" in names


# ----------------------------------------------------------------------------- scripts/lab, scripts/test


def fake_checkout(tmp_path: Path) -> tuple[Path, Path]:
    """The scripts and pyproject.toml in a folder whose ``.venv/bin`` holds stand-ins that log their
    calls: ``python`` (pip, pytest and compileall logged, anything else run by the real interpreter),
    ``toolkit``, ``ruff``, ``mypy``, ``lint-imports`` and ``chromium``; and Weave's ``.venv-weave``,
    as built."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    (repo / "bench").mkdir()
    requirements = shutil.copy(ROOT / "bench" / "weave-requirements.txt", repo / "bench")
    weave = repo / ".venv-weave"  # built already: its stamp is the requirements' digest
    (weave / "bin").mkdir(parents=True)
    (weave / "bin" / "python").write_text("")
    (weave / "bin" / "python").chmod(0o755)
    (weave / ".requirements-installed").write_text(
        hashlib.sha256(Path(requirements).read_bytes()).hexdigest()
    )
    bin_dir, log = repo / ".venv" / "bin", tmp_path / "calls.log"
    bin_dir.mkdir(parents=True)
    python = (
        "#!/usr/bin/env bash\n"
        'case "$1 $2" in "-m pip" | "-m pytest" | "-m compileall")\n'
        f'  echo "python $*" >> {log}; exit 0 ;;\n'
        "esac\n"
        f'exec {sys.executable} "$@"\n'
    )
    (bin_dir / "python").write_text(python)
    for tool in ("toolkit", "ruff", "mypy", "lint-imports", "chromium"):
        (bin_dir / tool).write_text(f'#!/usr/bin/env bash\necho "{tool} $*" >> {log}\n')
    for path in bin_dir.iterdir():
        path.chmod(0o755)
    return repo, log


def run(repo: Path, log: Path, *args: str) -> list[str]:
    """The stand-ins' calls and what the script says on stderr, in the order they happened."""
    log.write_text("")
    with log.open("a") as said:
        subprocess.run(["bash", *args], cwd=repo, check=True, timeout=60, stderr=said)
    return log.read_text().splitlines()


def test_the_suite_does_not_run_when_the_real_model_cannot_be_fetched(tmp_path: Path) -> None:
    """The fetch runs beside the linters: its failure still stops ``scripts/test`` before pytest."""
    repo, log = fake_checkout(tmp_path)
    (repo / ".venv" / "bin" / "toolkit").write_text(
        f'#!/usr/bin/env bash\necho "toolkit $*" >> {log}\nexit 3\n'
    )
    with log.open("a") as said:
        done = subprocess.run(["bash", "scripts/test"], cwd=repo, timeout=60, stderr=said)
    calls = log.read_text().splitlines()
    assert done.returncode == 3 and "toolkit fetch toolkit/smollm2-135m-instruct" in calls
    assert "lint-imports --no-cache" in calls and not any("pytest" in call for call in calls)


def test_lab_installs_what_a_user_needs_and_test_adds_the_dev_tools(tmp_path: Path) -> None:
    repo, log = fake_checkout(tmp_path)
    assert run(repo, log, "scripts/lab", "--no-browser") == [
        "lab: installing .[server,lab,research] into .venv (about 3 minutes the first time)...",
        "python -m pip install --quiet --upgrade pip",
        "python -m pip install --quiet torch==2.13.0",
        "python -m pip install --quiet -e .[server,lab,research]",
        "toolkit fetch toolkit/smollm2-135m-instruct",
        "toolkit lab --no-browser",
    ]
    calls = run(repo, log, "scripts/test", "tests/server/test_api_models.py", "-x")
    assert (
        calls[0] == "test: installing .[server,lab,research,dev,tracking] into .venv "
        "(about 3 minutes the first time)..."
    )
    assert calls[-2:] == [
        "python -m pip install --quiet -e .[server,lab,research,dev,tracking]",
        "python -m pytest --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg "
        "tests/server/test_api_models.py -x",
    ]  # with arguments: only pytest, no ruff, mypy or import-linter first
    # installed already: no pip; the real model fetched once (a look at its stamp after that)
    assert run(repo, log, "scripts/lab") == ["toolkit fetch toolkit/smollm2-135m-instruct", "toolkit lab"]
    calls = run(repo, log, "scripts/test")
    linters = [
        "ruff check toolkit tests bench conftest.py",
        "ruff format --check toolkit tests bench conftest.py",
        "mypy ",
        "lint-imports --no-cache",
    ]
    assert [c for c in calls if c in linters] == linters  # in this order; the fetch beside them
    byte_code = "python -m compileall -q toolkit tests bench conftest.py"  # once, for every process
    assert sorted(calls[:-1]) == sorted([byte_code, *linters, "toolkit fetch toolkit/smollm2-135m-instruct"])
    assert calls[-1] == (
        "python -m pytest --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg "
        "-n 2 --no-loadscope-reorder --durations=15"
    )  # the whole suite on two workers, after them
    with (repo / "pyproject.toml").open("a") as pyproject:
        pyproject.write("\n# changed\n")
    assert run(repo, log, "scripts/lab") == [
        "lab: installing .[server,lab,research] into .venv (about 3 minutes the first time)...",
        "python -m pip install --quiet --upgrade pip",
        "python -m pip install --quiet torch==2.13.0",
        "python -m pip install --quiet -e .[server,lab,research]",
        "toolkit fetch toolkit/smollm2-135m-instruct",
        "toolkit lab",
    ]
