"""The benches' local server: ``toolkit serve`` started in a process of its own, on a free port."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path


def start_server(
    folder: Path,
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
    log: Path | None = None,
    timeout: float = 60,
) -> tuple[subprocess.Popen[bytes], str, str]:
    """``toolkit serve *args`` on a free port with ``folder`` as its data folder and ``env`` added to
    this process's environment, its output to ``log`` if given, once it announces itself ready in
    ``server.json``: (process, URL, key). A server that has not started within ``timeout`` seconds
    (minutes on a loaded machine) is killed; the log's tail says why. A bench stopped by SIGTERM
    (``kill``, ``timeout``) exits through its ``finally`` blocks, so its servers stop with it instead
    of running on."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda signum, _: sys.exit(128 + signum))
    with open(log or os.devnull, "wb") as output:
        proc = subprocess.Popen(
            [sys.executable, "-m", "toolkit", "serve", "--port", "0", "--data-dir", str(folder), *args],
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                url = json.loads((folder / "server.json").read_text())["url"]
                return proc, url, (folder / "local.key").read_text().strip()
            except (FileNotFoundError, ValueError, KeyError):
                time.sleep(0.1)
    except BaseException:  # stopped (SIGTERM, ^C) while the server starts: it must not run on
        proc.kill()
        raise
    proc.kill()
    raise SystemExit(f"the server did not start:\n{log.read_text()[-2000:] if log else ''}")
