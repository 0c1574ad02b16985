"""What the learning benchmarks (learn_reverse.py, learn_agent.py) share: a client of a given server or of
a local server of their own in a temporary folder, and their section of docs/performance.md rewritten
in place."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import toolkit as tk

ROOT = Path(__file__).resolve().parent.parent


def start_server(folder: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str, str]:
    """``toolkit serve`` on a free port with ``folder`` as its data folder and ``env`` added to this
    process's environment: (process, URL, key)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit", "serve", "--port", "0", "--data-dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    for _ in range(600):
        try:
            url = json.loads((folder / "server.json").read_text())["url"]
            return proc, url, (folder / "local.key").read_text().strip()
        except (FileNotFoundError, ValueError, KeyError):
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start")


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
