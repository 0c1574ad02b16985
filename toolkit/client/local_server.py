"""The local server of a data folder: find it, start it in the background, report on it, stop it.

While a server is ready, ``server.json`` in its data folder names its URL, pid and version (the
server writes it after start-up and removes it at shutdown); ``local.key`` holds the local user's
key. Starts are serialised by a lock file (``filelock``: no ``fcntl``, so this works on Windows).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from filelock import FileLock

from ..types.service import Health
from ._errors import OneLine

DEFAULT_DATA_DIR = Path("~/.toolkit")
START_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
EXIT_MISSING_EXTRA = 3  # exit code of `toolkit serve` when the server extra is not installed
INSTALL_SERVER = "pip install 'rl-notebook-toolkit[server]'"


class MissingServerExtra(OneLine, ImportError):
    """The local server needs the ``server`` extra; the message says how to get it or what else to do."""


class ServerNotStarted(OneLine, RuntimeError):
    """The local server could not be started as asked (it exited, or one runs without the base models
    asked for); the message says why, from its log, and what to do."""


def missing_extra_message(module: str | None) -> str:
    missing = f" ({module} is not installed)" if module else ""
    return (
        f"the local server needs the server extra{missing}: {INSTALL_SERVER}; or point tk.connect() "
        "at a deployment (TOOLKIT_BASE_URL, or TOOLKIT_PRESET=wandb)"
    )


@dataclass(frozen=True)
class ServerInfo:
    """What ``server.json`` says of a server: where it listens, its process, version and start time."""

    url: str
    pid: int
    version: str | None
    started_at: float  # seconds since the epoch: when the server announced itself

    @property
    def uptime(self) -> float:
        return max(0.0, time.time() - self.started_at)


def data_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """``path``, else ``$TOOLKIT_DATA_DIR``, else ``~/.toolkit``, as an absolute path."""
    return Path(path or os.environ.get("TOOLKIT_DATA_DIR") or DEFAULT_DATA_DIR).expanduser().resolve()


def local_key(folder: Path) -> str | None:
    with contextlib.suppress(FileNotFoundError):
        return (folder / "local.key").read_text().strip() or None
    return None


def announced(folder: Path) -> ServerInfo | None:
    """The server ``server.json`` names, healthy or not."""
    path = folder / "server.json"
    try:
        info = json.loads(path.read_text())
        return ServerInfo(str(info["url"]), int(info["pid"]), info.get("version"), path.stat().st_mtime)
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None


def _healthy(url: str, key: str | None) -> bool:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        return httpx.get(f"{url}/v1/health", headers=headers, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def running(folder: Path) -> ServerInfo | None:
    """The server announced in ``folder`` if it answers its health check."""
    info = announced(folder)
    return info if info is not None and _healthy(info.url, local_key(folder)) else None


def local_server(
    folder: Path,
    *,
    start: bool = True,
    timeout: float = START_TIMEOUT,
    base_models: Sequence[str] = (),
    device: str | None = None,
) -> tuple[str, str | None]:
    """URL and key of the local server of ``folder``, starting one in the background if none runs
    (given ``timeout`` seconds to become healthy, counted from its last output to ``server.log``: the
    first fetch of a built-in model takes longer, and shows its progress there).

    ``base_models`` are ``toolkit serve --base-model`` values (``SOURCE[=NAME[,NAME...]]``) a server
    started here serves; a server found running must already serve each under its names. ``device``:
    the ``--device`` of a server started here (default: auto).
    """
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(folder / ".start.lock"):
        info = running(folder)
        if info is not None:
            url = info.url
            _check_base_models(folder, url, base_models)
        elif start:
            url = _start(folder, timeout, base_models, device)
        else:
            raise ConnectionError(f"no toolkit server is running for {folder}")
    return url, local_key(folder)


def base_model_names(value: str) -> tuple[str, ...]:
    """The names a ``--base-model`` value is served under: those after ``=``, else a folder's name
    or the hub id itself (as ``toolkit serve`` names them)."""
    source, _, names = value.partition("=")
    if names:
        return tuple(n.strip() for n in names.split(","))
    path = Path(source.strip()).expanduser()
    return (path.resolve().name,) if path.exists() else (source.strip(),)


def _check_base_models(folder: Path, url: str, base_models: Sequence[str]) -> None:
    wanted = [name for value in base_models for name in base_model_names(value)]
    if not wanted:
        return
    key = local_key(folder)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    health = Health.model_validate_json(httpx.get(f"{url}/v1/health", headers=headers, timeout=10.0).content)
    served = [name for m in health.models or [] for name in (m.name, *m.aliases)]
    missing = [name for name in wanted if name not in served]
    if missing:
        raise ServerNotStarted(
            f"the toolkit server of {folder} is already running without the base model "
            f"{', '.join(missing)} (it serves {', '.join(served)}); stop it (toolkit stop --data-dir "
            f"{folder}) and connect again to start it with the base models asked for"
        )


def _last_line(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


def _start(folder: Path, timeout: float, base_models: Sequence[str] = (), device: str | None = None) -> str:
    log_path = folder / "server.log"
    command = [sys.executable, "-m", "toolkit", "serve", "--port", "0", "--data-dir", str(folder)]
    for value in base_models:
        command += ["--base-model", value]
    if device is not None:
        command += ["--device", device]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    logged = log_path.stat().st_size
    while time.monotonic() < deadline:
        if log_path.stat().st_size != logged:  # busy, e.g. fetching a model: its output restarts the clock
            logged, deadline = log_path.stat().st_size, time.monotonic() + timeout
        if proc.poll() is not None:
            if proc.returncode == EXIT_MISSING_EXTRA:
                raise MissingServerExtra(_last_line(log_path))
            raise ServerNotStarted(
                f"the toolkit server exited with code {proc.returncode}: {_last_line(log_path)} "
                f"(see {log_path})"
            )
        info = announced(folder)
        if info is not None and info.pid == proc.pid and _healthy(info.url, local_key(folder)):
            return info.url
        time.sleep(0.1)
    proc.kill()
    raise TimeoutError(
        f"the toolkit server did not become healthy in {timeout:.0f} s without output; see {log_path}"
    )


def _exited(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):  # a server this process started: reap it
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _ended(info: ServerInfo, key: str | None) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would terminate the process there; health tells instead
        return not _healthy(info.url, key)
    return _exited(info.pid)


def stop(folder: Path, timeout: float = STOP_TIMEOUT) -> ServerInfo | None:
    """Stop the running server of ``folder`` gracefully (SIGTERM) and wait until its process has
    ended; returns what it was, or ``None`` if none was running."""
    info = running(folder)
    if info is None:
        return None
    key = local_key(folder)
    os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while not _ended(info, key):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the toolkit server (pid {info.pid}) did not stop in {timeout:.0f} s")
        time.sleep(0.1)
    left = announced(folder)
    if left is not None and left.pid == info.pid:  # ended without its shutdown (e.g. terminated on Windows)
        (folder / "server.json").unlink(missing_ok=True)
    return info
