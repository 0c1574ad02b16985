"""What the learning benchmarks (learn_reverse.py, learn_agent.py) share: a local server of their own in
a temporary folder, and their section of docs/performance.md rewritten in place."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def start_server(folder: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """``toolkit serve`` on a free port with ``folder`` as its data folder: (process, URL, key)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "toolkit", "serve", "--port", "0", "--data-dir", str(folder)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(600):
        try:
            url = json.loads((folder / "server.json").read_text())["url"]
            return proc, url, (folder / "local.key").read_text().strip()
        except (FileNotFoundError, ValueError, KeyError):
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start")


def write_section(section: str, text: str) -> None:
    """Replace the ``section`` heading's part of docs/performance.md with ``text`` (or append it)."""
    path = ROOT / "docs" / "performance.md"
    current = path.read_text() if path.exists() else "# Performance\n"
    pattern = re.compile(rf"{re.escape(section)}\n.*?(?=\n## |\Z)", re.S)
    if pattern.search(current):
        updated = pattern.sub(lambda _: text.rstrip("\n"), current)
    else:
        updated = current.rstrip("\n") + "\n\n" + text
    path.write_text(updated.rstrip("\n") + "\n")
