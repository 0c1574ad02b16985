"""What can be checked of the Binder set-up without Docker: files parse, packages match, start works."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import yaml

from support.user_extras import lab_extras

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"
# pip name -> conda-forge name, where they differ
CONDA_NAMES = {"torch": "pytorch-cpu"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip().lower()


def _bound(requirement: str) -> str:
    """The version part (``>=1.50``), without the comment or marker."""
    return requirement.split("#")[0].split(";")[0][len(_name(requirement)) :].strip()


def _pyproject_user_deps() -> dict[str, str]:
    """Name (conda-forge's) -> version bound of the core and of scripts/lab's extras (the user's)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    deps = project["dependencies"] + [d for extra in lab_extras() for d in extras[extra]]
    return {CONDA_NAMES.get(_name(d), _name(d)): _bound(d) for d in deps}


def test_environment_lists_exactly_what_scripts_lab_installs() -> None:
    """The same packages, with the same lower bounds, as the core and the extras of scripts/lab
    (what the notebooks import included: tests/packaging/test_user_extras.py)."""
    env = yaml.safe_load((BINDER / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    listed = {_name(d): _bound(d) for d in env["dependencies"] if isinstance(d, str)}
    assert "python" in listed and "pip" in listed
    assert {k: v for k, v in listed.items() if k not in {"python", "pip"}} == _pyproject_user_deps()
    assert "pytorch-cpu" in listed  # CPU torch, never the CUDA build
    assert {"openai", "opentelemetry-sdk"} <= set(listed)  # notebooks 07 and 05


def test_scripts_are_executable_bash_with_strict_mode() -> None:
    for name in ("postBuild", "start"):
        path = BINDER / name
        text = path.read_text()
        assert os.access(path, os.X_OK), name
        assert text.startswith("#!/usr/bin/env bash") and "set -euo pipefail" in text
    assert (BINDER / "start").read_text().rstrip().endswith('exec "$@"')
    subprocess.run(["bash", "-n", str(BINDER / "start")], check=True)
    subprocess.run(["bash", "-n", str(BINDER / "postBuild")], check=True)


def test_start_runs_a_healthy_server_then_execs_its_arguments(tmp_path: Path) -> None:
    data = tmp_path / "data"
    probe = (
        "import json, os, httpx; d = os.environ['TOOLKIT_DATA_DIR'];"
        "info = json.load(open(d + '/server.json')); key = open(d + '/local.key').read().strip();"
        "r = httpx.get(info['url'] + '/v1/health', headers={'Authorization': 'Bearer ' + key});"
        "print(json.dumps({'status': r.status_code, 'pid': info['pid']}))"
    )
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "TOOLKIT_DATA_DIR": str(data), "PATH": path}
    out = subprocess.run(
        ["bash", str(BINDER / "start"), "python", "-c", probe],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    try:
        assert result["status"] == 200
        assert "toolkit server: http://127.0.0.1:" in out.stdout
    finally:
        os.kill(result["pid"], 15)
    # the server announced itself and went away cleanly on SIGTERM
    for _ in range(100):
        if not (data / "server.json").exists():
            break
        time.sleep(0.1)
    assert not (data / "server.json").exists()
