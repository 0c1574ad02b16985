"""The command line: ``toolkit status`` / ``toolkit stop`` on a real local server, and ``toolkit lab``
with a stand-in ``jupyter`` (root flag, arguments, and the server that stops with JupyterLab)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from toolkit import cli
from toolkit.client.local_server import local_server, running

ROOT = Path(__file__).resolve().parents[2]


def toolkit_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "toolkit", *args],
        env={**os.environ, **(env or {}), "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def fake_jupyter(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A ``jupyter`` on PATH that records its arguments and the server it found, then exits."""
    bin_dir, record = tmp_path / "bin", tmp_path / "jupyter.json"
    bin_dir.mkdir()
    script = bin_dir / "jupyter"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "folder = os.environ['TOOLKIT_DATA_DIR']\n"
        "server = json.load(open(os.path.join(folder, 'server.json')))\n"
        f"json.dump({{'args': sys.argv[1:], 'data': folder, 'server': server}}, open({str(record)!r}, 'w'))\n"
    )
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}, record


def test_status_and_stop_of_a_running_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fake_jupyter: tuple[dict[str, str], Path]
) -> None:
    folder = tmp_path / "data"
    assert cli.main(["status", "--data-dir", str(folder)]) == 1
    assert capsys.readouterr().out == f"toolkit server: not running (data: {folder})\n"

    url, _ = local_server(folder)  # as tk.connect() starts it: in the background
    info = running(folder)
    assert info is not None and info.url == url
    assert cli.main(["status", "--data-dir", str(folder)]) == 0
    out = capsys.readouterr().out
    pattern = (
        rf"toolkit server: running at {re.escape(url)} \(pid {info.pid}, version [\w.]+, up \d+ s\); data: "
    )
    assert re.fullmatch(pattern + re.escape(str(folder)) + "\n", out), out

    # `toolkit lab` leaves a server alone that ran before it
    env, record = fake_jupyter
    lab = toolkit_cli("lab", "--data-dir", str(folder), env=env)
    assert lab.returncode == 0, lab.stderr
    assert f"toolkit server: {url} (data: {folder}; already running, left running)" in lab.stdout
    assert json.loads(record.read_text())["server"]["pid"] == info.pid
    assert running(folder) == info

    assert cli.main(["stop", "--data-dir", str(folder)]) == 0
    assert capsys.readouterr().out == f"toolkit server: stopped {url} (pid {info.pid})\n"
    assert not psutil.pid_exists(info.pid) and not (folder / "server.json").exists()
    assert cli.main(["stop", "--data-dir", str(folder)]) == 1
    assert capsys.readouterr().out == f"toolkit server: not running (data: {folder})\n"


def test_lab_stops_the_server_it_started(tmp_path: Path, fake_jupyter: tuple[dict[str, str], Path]) -> None:
    folder = tmp_path / "data"
    env, record = fake_jupyter
    lab = toolkit_cli("lab", "--data-dir", str(folder), "--notebooks", str(tmp_path), "--no-browser", env=env)
    assert lab.returncode == 0, lab.stderr
    seen = json.loads(record.read_text())
    root = os.geteuid() == 0
    assert seen["args"] == [
        "lab",
        f"--notebook-dir={tmp_path}",
        "--no-browser",
        *(["--allow-root"] if root else []),
    ]
    assert seen["data"] == str(folder)
    url, pid = seen["server"]["url"], seen["server"]["pid"]
    lines = lab.stdout.splitlines()
    assert lines[0] == f"toolkit server: {url} (data: {folder}; stops with JupyterLab)"
    assert lines[-1] == f"toolkit server: stopped {url}"
    assert ("toolkit lab: running as root, so JupyterLab gets --allow-root" in lines) is root
    assert not psutil.pid_exists(pid) and not (folder / "server.json").exists()


def test_root_gets_allow_root_once(capsys: pytest.CaptureFixture[str]) -> None:
    notebooks = Path("/nb")
    assert cli.jupyter_command(notebooks, ["--no-browser"], root=False) == [
        "jupyter",
        "lab",
        "--notebook-dir=/nb",
        "--no-browser",
    ]
    assert capsys.readouterr().out == ""
    assert cli.jupyter_command(notebooks, ["--no-browser"], root=True)[-1] == "--allow-root"
    assert capsys.readouterr().out == "toolkit lab: running as root, so JupyterLab gets --allow-root\n"
    assert cli.jupyter_command(notebooks, ["--allow-root"], root=True).count("--allow-root") == 1


def test_lab_ignores_ctrl_c_and_passes_sigterm_on(tmp_path: Path) -> None:
    child = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); "
        "print('ready', flush=True); time.sleep(60)"
    )
    parent = (
        "import os, sys; from toolkit.cli import run_forwarding_signals; "
        f"sys.exit(run_forwarding_signals([sys.executable, '-c', {child!r}], dict(os.environ)))"
    )
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-c", parent],
        env={**os.environ, "PYTHONPATH": path},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)  # JupyterLab gets Ctrl-C from the terminal; toolkit lab waits on
        time.sleep(0.5)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 7  # JupyterLab's exit code, after it got the SIGTERM
    finally:
        proc.kill()
        proc.wait()


def test_other_commands_reject_unknown_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["keys", "create", "--user", "u", "--bogus"])
    assert exc.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_status_and_stop_read_the_data_folder_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv("TOOLKIT_DATA_DIR", str(tmp_path / "env-data"))
    assert cli.main(["status"]) == 1
    assert capsys.readouterr().out == f"toolkit server: not running (data: {tmp_path / 'env-data'})\n"
