"""Shared fixtures: a real ``toolkit serve`` process on loopback with a temp data folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

import toolkit as tk

START_TIMEOUT = 120.0


@dataclass
class LocalServer:
    """A server process of the test suite; ``restart()`` kills it and starts it on the same folder."""

    data_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    url: str = ""
    key: str = ""
    extra_args: tuple[str, ...] = ()

    def start(self) -> LocalServer:
        server_file = self.data_dir / "server.json"
        server_file.unlink(missing_ok=True)
        log = open(self.data_dir / "server.log", "ab")  # noqa: SIM115 (closed with the process)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "toolkit",
                "serve",
                "--port",
                "0",
                "--data-dir",
                str(self.data_dir),
                *self.extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {(self.data_dir / 'server.log').read_text()[-3000:]}")
            try:
                info = json.loads(server_file.read_text())
                self.url = info["url"]
                self.key = (self.data_dir / "local.key").read_text().strip()
                r = httpx.get(
                    f"{self.url}/v1/health", headers={"Authorization": f"Bearer {self.key}"}, timeout=2
                )
                if r.status_code == 200:
                    return self
            except (FileNotFoundError, ValueError, KeyError, httpx.HTTPError):
                pass
            time.sleep(0.1)
        raise TimeoutError("server did not start")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        """``kill -9``: no clean shutdown."""
        self.stop(signal.SIGKILL)

    def restart(self) -> LocalServer:
        self.stop()
        return self.start()

    def client(self, key: str | None = None, **kw: object) -> tk.Client:
        return tk.Client(self.url, key or self.key, **kw)  # type: ignore[arg-type]

    def async_client(self, key: str | None = None, **kw: object) -> tk.AsyncClient:
        return tk.AsyncClient(self.url, key or self.key, **kw)  # type: ignore[arg-type]

    def new_user_key(self, name: str) -> str:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "toolkit",
                "keys",
                "create",
                "--data-dir",
                str(self.data_dir),
                "--user",
                name,
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        return out.stdout.strip()

    def http(self, key: str | None = None, timeout: float = 60) -> httpx.Client:
        """A raw HTTP client with the key, for exact wire checks."""
        headers = {"Authorization": f"Bearer {key or self.key}"} if key != "" else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """One server shared by the whole session (tests isolate themselves by creating their own models)."""
    srv = LocalServer(tmp_path_factory.mktemp("server")).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def random_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """A server of the random-init built-in model only, for tests of the sampling and decoding
    machinery that need its spread-out distributions (the pre-trained default is peaked)."""
    args = ("--base-model", "toolkit/tiny-random-1m")
    srv = LocalServer(tmp_path_factory.mktemp("random"), extra_args=args).start()
    yield srv
    srv.stop()


@pytest.fixture
def random_http(random_server: LocalServer) -> Iterator[httpx.Client]:
    with random_server.http() as client:
        yield client


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[LocalServer]:
    """A server of its own, for tests that restart or kill it, or need its job queue to themselves."""
    srv = LocalServer(tmp_path / "data")
    srv.data_dir.mkdir()
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def http(server: LocalServer) -> Iterator[httpx.Client]:
    with server.http() as client:
        yield client


@pytest.fixture(scope="module")
def tr(server: LocalServer) -> Iterator[httpx.Client]:
    """A raw HTTP client of the trace service (Bearer key)."""
    from support.traces_helpers import traces_http

    with traces_http(server.url, server.key) as client:
        yield client


@pytest.fixture
def project() -> str:
    """A fresh ``entity/project`` of the trace service."""
    from support.traces_helpers import new_project

    return new_project()


@pytest.fixture(scope="session")  # one per worker: the second runs of notebooks are in several groups
def user_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A python that sees only what ``scripts/lab`` installs (``user_extras.user_venv``)."""
    from support.user_extras import user_venv

    return user_venv(tmp_path_factory.mktemp("user-venv"))


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The real model's converted folder in ``$TOOLKIT_MODEL_CACHE`` (set by conftest.py): fetched and
    converted at most once per machine, the workers sharing it under the cache's lock."""
    from toolkit.server.engine.fetched import SMOLLM2, fetch

    return fetch(SMOLLM2, Path(os.environ["TOOLKIT_MODEL_CACHE"]))
