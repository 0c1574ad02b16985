"""bench/learning_runs.py ``learning_client``: a bench stopped by SIGTERM stops the server it started."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
from bench_script import ROOT

HOLD = """
import sys, time
sys.path.insert(0, "bench")
from learning_runs import learning_client
with learning_client(None, None, prefix="sigterm-") as client:
    print(client.config.base_url, flush=True)
    time.sleep(600)
"""


def test_a_bench_stopped_by_sigterm_stops_its_server() -> None:
    bench = subprocess.Popen([sys.executable, "-c", HOLD], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert bench.stdout is not None
        url = bench.stdout.readline().strip().rstrip("/")
        assert httpx.get(f"{url}/v1/health", timeout=30).status_code == 401  # up (no key sent)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(60) == 128 + signal.SIGTERM
        try:
            httpx.get(f"{url}/v1/health", timeout=5)
            answered = True
        except httpx.TransportError:
            answered = False
        assert not answered, "the bench's server still answers after the bench was stopped"
    finally:
        bench.terminate()
        bench.wait(60)
