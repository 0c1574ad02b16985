"""What the learning benchmarks (learn_reverse.py, learn_agent.py) share: a client of a given server or of
a local server of their own in a temporary folder, and their section of docs/performance.md rewritten
in place."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import toolkit as tk

ROOT = Path(__file__).resolve().parent.parent


def start_server(
    folder: Path,
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
    log: Path | None = None,
    timeout: float = 60,
) -> tuple[subprocess.Popen[bytes], str, str]:
    """``toolkit serve *args`` on a free port with ``folder`` as its data folder and ``env`` added to
    this process's environment, its output to ``log`` if given: (process, URL, key). A server that has
    not started within ``timeout`` seconds (minutes on a loaded machine) is killed; the log's tail
    says why. A bench stopped by SIGTERM (``kill``, ``timeout``) exits through its ``finally`` blocks,
    so its servers stop with it instead of running on."""
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
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            url = json.loads((folder / "server.json").read_text())["url"]
            return proc, url, (folder / "local.key").read_text().strip()
        except (FileNotFoundError, ValueError, KeyError):
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the server did not start:\n{log.read_text()[-2000:] if log else ''}")


@contextmanager
def learning_client(url: str | None, key: str | None, prefix: str) -> Iterator[tk.Client]:
    """A client of the server at ``url``, or of a server of its own in a temporary folder (removed after)."""
    if url:
        with tk.Client(url, key) as client:
            yield client
        return
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        proc, url, key = start_server(Path(folder))
        try:
            with tk.Client(url, key) as client:
                yield client
        finally:
            proc.terminate()
            proc.wait(30)


def write_section(section: str, text: str) -> None:
    """Replace the ``section`` heading's part of docs/performance.md, up to the next heading (a
    subsection too, which stays), with ``text``; or append it."""
    path = ROOT / "docs" / "performance.md"
    current = path.read_text() if path.exists() else "# Performance\n"
    pattern = re.compile(rf"{re.escape(section)}\n.*?(?=\n##+ |\Z)", re.S)
    if pattern.search(current):
        updated = pattern.sub(lambda _: text.rstrip("\n") + "\n", current)
    else:
        updated = current.rstrip("\n") + "\n\n" + text
    path.write_text(updated.rstrip("\n") + "\n")
