"""Runs a bench/ script as the suite's smoke tests do: a subprocess of this interpreter from the repo root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(script: str, *args: str, timeout: float = 300) -> str:
    """Run ``bench/<script> *args``; its stdout (the run fails the test unless it exits 0)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert out.returncode == 0, (
        f"{script} exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    return out.stdout


def table_rows(stdout: str) -> list[list[str]]:
    """The cells of every Markdown table line of a report (headers too, rules not), stripped."""
    return [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in stdout.splitlines()
        if line.startswith("| ")
    ]
