"""The soak's report: chat requests and their latency, stalls, rollouts and jobs, what was read back,
the server's memory and the kills; one figure per line, as docs/reliability.md quotes them."""

from __future__ import annotations

import statistics

from soak_kills import Killer
from soak_mix import Mix

MIB = 2**20


def print_report(
    mix: Mix,
    killer: Killer,
    failures: list[str],
    *,
    wall: float,
    stalls: int,
    rss_end: int,
    health: int,
    memory: list[str],
) -> None:
    s, acked, args = mix.stats, mix.acked, mix.args
    log = (mix.server.data_dir / "server.log").read_text(errors="replace")
    n = len(s.latencies) + s.errors + s.abandoned
    print(
        f"chat requests: {n} ({len(s.latencies)} answered, {s.errors} failed, {s.abandoned} abandoned on "
        f"purpose) in {wall:.0f} s, {n / wall:.1f}/s"
    )
    print(
        f"latency of answered requests: p50 {percentile(s.latencies, 50) * 1000:.0f} ms, "
        f"p99 {percentile(s.latencies, 99) * 1000:.0f} ms, max {max(s.latencies, default=0) * 1000:.0f} ms"
    )
    print(
        f"stalls: watchdog {stalls} (warnings in server.log: {log.count('toolkit.watchdog: stall:')}), "
        f"client-side: {s.slow} slower than {args.slow_seconds:g} s, {s.timeouts} timed out"
    )
    print(f"rollouts: {s.rollouts} ({s.failed_rollouts} failed); jobs: {dict(sorted(s.jobs.items()))}")
    print(
        f"acknowledged and read back: {len(acked.trace_batches)} trace batches, "
        f"{sum(acked.logged.values())} logged trajectories, {len(acked.checkpoints)} checkpoints"
    )
    print(
        f"server RSS: start {mix.rss_start / MIB:.0f} MiB, end {rss_end / MIB:.0f} MiB; "
        f"health after: {health}"
    )
    for line in memory:
        print(line)
    print(f"kills: {len(killer.reports)}, failed checks: {len(failures)}")
    if args.kills:
        after = len(s.latencies) - killer.answered_at_kill
        print(f"after the last kill: {mix.rounds_after_kill} whole rounds, {after} answered chat requests")
    for problem in failures:
        print(f"- FAILED: {problem}")
    for line in first_error(log):
        print(line)


def first_error(log: str, context: int = 12) -> list[str]:
    """The server log's count of unhandled errors, and the first one's headline and the last lines of
    its traceback (where the exception was raised), so that a failed run says why."""
    lines = log.splitlines()
    heads = [i for i, line in enumerate(lines) if " ERROR " in line]
    if not heads:
        return []
    first = heads[0]
    end = next((i for i in range(first + 1, len(lines)) if lines[i].startswith(("ERROR:", "20"))), len(lines))
    return [
        f"server.log: {len(heads)} unhandled errors; the first:",
        lines[first],
        *lines[max(first + 1, end - context) : end],
    ]


def percentile(values: list[float], q: int) -> float:
    if not values:
        return 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]
