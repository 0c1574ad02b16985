"""bench/learning_runs.py ``learning_client``: a bench stopped by SIGTERM stops the server it started."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid

import httpx
import psutil
from bench_script import ROOT

HOLD = """
import glob, json, sys, tempfile, time
sys.path.insert(0, "bench")
from learning_runs import learning_client
with learning_client(None, None, prefix=PREFIX) as client:
    [announced] = glob.glob(f"{tempfile.gettempdir()}/{PREFIX}*/server.json")
    print(json.dumps({"url": client.config.base_url, "pid": json.load(open(announced))["pid"]}), flush=True)
    time.sleep(600)
"""


def test_a_bench_stopped_by_sigterm_stops_its_server() -> None:
    code = f"PREFIX = {f'sigterm-{uuid.uuid4().hex}-'!r}\n{HOLD}"
    bench = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert bench.stdout is not None
        server = json.loads(bench.stdout.readline())
        assert httpx.get(f"{server['url']}/v1/health", timeout=30).status_code == 401  # up (no key sent)
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(60) == 128 + signal.SIGTERM
        assert not psutil.pid_exists(server["pid"]), "the bench's server runs on after the bench stopped"
    finally:
        bench.terminate()
        bench.wait(60)
