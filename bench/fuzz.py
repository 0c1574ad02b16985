"""Deep fuzz of a fresh local server: ``--examples`` generated requests for every operation of its
OpenAPI (schemathesis' fuzzing phase, valid and invalid data, reproducible from ``--seed``), with the
checks of the suite's fuzz test (tests/support/reliability_fuzzing.py): no 5xx, 2xx bodies match the declared
schema and media type, every 4xx in the owning service's error shape. Unlike the test it does not stop
at an operation's first failure: it counts every request and every failure, prints one example of
each kind of failure, then the figures that docs/reliability.md records. Exits 1 on any failure.

    .venv/bin/python bench/fuzz.py --examples 1000 --seed 20261123
    .venv/bin/python bench/fuzz.py --examples 50 --operations /traces/   # one service
    .venv/bin/python bench/fuzz.py --examples 5000 --seconds 3600   # at most an hour, even per operation
    .venv/bin/python bench/fuzz.py --smoke   # 1 request per operation (the test suite runs it)
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from server_process import start_server

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from schemathesis import Case, GenerationMode
from schemathesis.core.failures import FailureGroup

from support.reliability_fuzzing import ADDITIONAL_CHECKS, CHECKS, aim, fuzz_schema, seed_targets
from toolkit import cli


class OutOfTime(Exception):
    """The operation's share of ``--seconds`` is spent."""


@dataclass
class Tally:
    requests: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    server_errors: int = 0
    transport_errors: int = 0
    check_failures: int = 0
    examples: dict[str, str] = field(default_factory=dict)

    def note(self, kind: str, case: Case, detail: str) -> None:
        key = f"{kind} {case.method} {case.path}"
        if key not in self.examples:
            self.examples[key] = f"{case.as_curl_command()}\n    -> {detail[:600]}"


def fuzz_operation(
    operation: Any, examples: int, seed: int, url: str, key: str, ids: dict[str, Any], seconds: float
) -> Tally:
    """Send ``examples`` generated requests to one operation (fewer if ``seconds`` pass first) and
    tally what came back."""
    tally = Tally()
    deadline = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {key}"}
    cases = st.one_of([operation.as_strategy(generation_mode=mode) for mode in GenerationMode])

    @hypothesis_seed(seed)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
    )
    @given(case=cases)
    def run(case: Case) -> None:
        if time.monotonic() > deadline:
            raise OutOfTime
        aim(case, ids)
        tally.requests += 1
        try:
            response = case.call(base_url=url, headers=headers, timeout=60)
        except Exception as exc:  # a dropped or reset connection is a finding, not a crash
            tally.transport_errors += 1
            tally.note("transport", case, repr(exc))
            return
        tally.statuses[response.status_code] += 1
        if response.status_code >= 500:
            tally.server_errors += 1
            tally.note(str(response.status_code), case, response.text)
            return
        try:
            case.validate_response(response, checks=CHECKS, additional_checks=ADDITIONAL_CHECKS)
        except (FailureGroup, Exception) as exc:  # a FailureGroup is a BaseException
            tally.check_failures += 1
            tally.note("check", case, str(exc))

    with contextlib.suppress(OutOfTime):
        run()
    return tally


def new_key(data_dir: Path, user: str) -> str:
    """``toolkit keys create`` in this process (the server modules are loaded already; a subprocess
    would import them again, seconds of CPU)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["keys", "create", "--data-dir", str(data_dir), "--user", user])
    return out.getvalue().strip()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=1000, help="generated requests per operation")
    parser.add_argument("--seed", type=int, default=20261123)
    parser.add_argument("--operations", default="", help="only operations whose path contains this")
    parser.add_argument(
        "--seconds", type=float, default=0, help="stop each operation after its share of this time"
    )
    parser.add_argument("--smoke", action="store_true", help="1 generated request per operation, for CI")
    args = parser.parse_args()
    if args.smoke:
        args.examples = 1
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp)
        proc, url, _ = start_server(data_dir, log=data_dir / "server.log", timeout=180)
        try:
            key = new_key(data_dir, "fuzzer")
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
                ids = seed_targets(http)
            schema = fuzz_schema(args.examples, args.seed)
            total = Tally()
            operations = [op.ok() for op in schema.get_all_operations()]
            operations = [op for op in operations if args.operations in op.path]
            share = args.seconds / len(operations) if args.seconds else float("inf")
            for operation in operations:
                t0 = time.monotonic()
                tally = fuzz_operation(operation, args.examples, args.seed, url, key, ids, share)
                bad = tally.server_errors + tally.transport_errors + tally.check_failures
                print(
                    f"{operation.method.upper():6} {operation.path:55} {tally.requests:6} requests"
                    f" {bad:4} failures  {time.monotonic() - t0:6.1f} s",
                    flush=True,
                )
                total.requests += tally.requests
                total.statuses.update(tally.statuses)
                total.server_errors += tally.server_errors
                total.transport_errors += tally.transport_errors
                total.check_failures += tally.check_failures
                total.examples.update(tally.examples)
            healthy = httpx.get(f"{url}/v1/health", headers={"Authorization": f"Bearer {key}"}).status_code
        finally:
            proc.terminate()
            proc.wait(60)
    for name, example in total.examples.items():
        print(f"\n[{name}]\n{example}")
    by_class: Counter[str] = Counter()
    for status, count in total.statuses.items():
        by_class[f"{status // 100}xx"] += count
    print(
        f"\nrequests: {total.requests}, operations: {len(operations)}, examples per operation:"
        f" {args.examples}, seed: {args.seed}\nserver errors (5xx): {total.server_errors},"
        f" transport errors: {total.transport_errors}, other check failures: {total.check_failures}"
        f"\nstatuses: {dict(sorted(by_class.items()))}, health afterwards: {healthy},"
        f" wall time: {time.monotonic() - started:.0f} s"
    )
    return 1 if total.server_errors or total.transport_errors or total.check_failures else 0


if __name__ == "__main__":
    sys.exit(main())
