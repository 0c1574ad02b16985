"""What the learning benchmarks (learn_reverse.py, learn_agent.py) share: a client of a given server or of
a local server of their own in a temporary folder, and their section of docs/performance.md rewritten
in place."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from server_process import start_server

import toolkit as tk

ROOT = Path(__file__).resolve().parent.parent


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
