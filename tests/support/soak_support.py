"""The figures of a bench/soak.py report, read by the soak's smoke test and its kill test."""

from __future__ import annotations

import re


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
