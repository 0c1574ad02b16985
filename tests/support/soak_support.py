"""The figures of a bench/soak.py report, read by the soak's smoke test and its kill test."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def figures(out: str) -> dict[str, int]:
    found = {
        "requests": r"^chat requests: (\d+) \(",
        "answered": r"^chat requests: \d+ \((\d+) answered",
        "failed": r"answered, (\d+) failed",
        "abandoned": r"failed, (\d+) abandoned",
        "watchdog": r"^stalls: watchdog (\d+)",
        "warnings": r"warnings in server.log: (\d+)",
        "slow": r"client-side: (\d+) slower",
        "timeouts": r"(\d+) timed out",
        "rollouts": r"^rollouts: (\d+)",
        "failed_rollouts": r"^rollouts: \d+ \((\d+) failed\)",
        "succeeded": r"'succeeded': (\d+)",
        "traces": r"read back: (\d+) trace batches",
        "logged": r"(\d+) logged trajectories",
        "checkpoints": r"(\d+) checkpoints$",
        "rss_start": r"RSS: start (\d+) MiB",
        "rss_end": r"end (\d+) MiB",
        "kills": r"^kills: (\d+)",
        "failed_checks": r"failed checks: (\d+)",
    }
    values = {}
    for name, pattern in found.items():
        match = re.search(pattern, out, re.M)
        assert match, f"{name} missing from the report:\n{out}"
        values[name] = int(match[1])
    return values


def memory_report(out: str) -> dict[str, Any]:
    """The memory lines of a bench/soak.py report: the samples' file and their count; and, where the
    last server process has enough samples for a slope (``slope`` None otherwise), RSS at its first and
    last sample, the slope's window and value, each part's slope and the part that grew most."""
    head = re.search(r"^memory: (\d+) samples every \S+ s in (\S+?)[ ;(]", out, re.M)
    assert head, f"memory line missing from the report:\n{out}"
    path = Path(head[2])
    report: dict[str, Any] = {"samples": int(head[1]), "path": path, "chart": path.with_suffix(".svg")}
    rss = re.search(
        r"^RSS: (\d+) MiB at \d+ s, (\d+) MiB at \d+ s.*slope over the last \d+ s: ([-+][\d.]+) MiB/h$",
        out,
        re.M,
    )
    parts = re.search(r"^slopes over that window \(MiB/h\): (.+); grew most: (\w+)$", out, re.M)
    if not (rss and parts):
        return report | {"slope": None}
    return report | {
        "rss_first": int(rss[1]),
        "rss_last": int(rss[2]),
        "slope": float(rss[3]),
        "parts": {name: float(value) for name, value in re.findall(r"(\w+) ([-+][\d.]+)", parts[1])},
        "grew_most": parts[2],
    }
