"""The soak's server: ``toolkit serve`` on one data folder and port, killed and restarted in place."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Server:
    """``toolkit serve`` on one data folder and port, its output appended to ``server.log``."""

    def __init__(self, data_dir: Path, port: int, args: list[str]) -> None:
        self.data_dir, self.port, self.args = data_dir, port, args
        self.url = f"http://127.0.0.1:{port}"
        self.hold = data_dir / "hold-checkpoint"  # while it exists, a job waits before its commit
        self.held = data_dir / "hold-checkpoint.held"  # the server's: a job waits there now
        self.proc: subprocess.Popen[bytes] | None = None
        self.key = ""

    def start(self) -> None:
        (self.data_dir / "server.json").unlink(missing_ok=True)
        log = open(self.data_dir / "server.log", "ab")  # noqa: SIM115 (lives as long as the server)
        cmd = [sys.executable, "-m", "toolkit", "serve", "--port", str(self.port)]
        cmd += ["--data-dir", str(self.data_dir), *self.args]
        env = {**os.environ, "TOOLKIT_CHECKPOINT_PAUSE_FILE": str(self.hold)}  # see soak_kills.Killer
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"server exited {self.proc.returncode}; see {self.data_dir / 'server.log'}"
                )
            try:
                self.key = (self.data_dir / "local.key").read_text().strip()
                json.loads((self.data_dir / "server.json").read_text())
                if self.http().get("/v1/health", timeout=5).status_code == 200:
                    return
            except (OSError, ValueError, httpx.HTTPError):
                pass
            time.sleep(0.2)
        raise TimeoutError("server did not start")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def http(self, timeout: float = 60) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.key}"}, timeout=timeout
        )

    def rss(self) -> int:
        assert self.proc is not None
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def stalls(self) -> int:
        with self.http(10) as http:
            return int(http.get("/v1/health").json().get("stalls") or 0)
