"""Interrupting ``job.wait()`` (Ctrl-C, a notebook's stop button) against the real server: a real
SIGINT lands while the main thread waits (in a process of its own, so that the signal cannot reach the
test runner); IPython shows one line naming the job, that it keeps running and how to cancel it,
and no transport traceback; a script's traceback has no httpx/httpcore frame either. The job runs on."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import long_sft_job, new_model, wait_for_event, wait_job

INTERRUPTED = r"""
import json, os, signal, sys, threading, time, traceback
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
import toolkit as tk

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a kernel, whatever the parent set
handle = tk.Client(os.environ["URL"], os.environ["KEY"]).training_jobs.handle(os.environ["JOB"])
main = threading.main_thread().ident


def in_wait():
    frame = sys._current_frames().get(main)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "wait" and code.co_filename.endswith(os.path.join("client", "jobs.py")):
            return True
        frame = frame.f_back
    return False


def interrupt_in_wait():
    while not in_wait():  # until the main thread follows the job
        time.sleep(0.02)
    os.kill(os.getpid(), signal.SIGINT)


threading.Thread(target=interrupt_in_wait, daemon=True).start()
shell = InteractiveShell.instance()
shell.user_ns["handle"] = handle
with capture_output() as cell:
    shell.run_cell("handle.wait(progress=False)")
threading.Thread(target=interrupt_in_wait, daemon=True).start()
try:
    handle.wait(progress=False)
    script = []
except KeyboardInterrupt as exc:
    script = traceback.format_exception(exc)
print(json.dumps({"stdout": cell.stdout, "stderr": cell.stderr, "script": script}))
"""


def test_an_interrupted_wait_says_the_job_runs_on_in_one_line(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "interrupt")
    job = long_sft_job(client, model.id, seed=13)
    wait_for_event(client, job.id, "gradient_step")
    env = {**os.environ, "URL": server.url, "KEY": server.key, "JOB": job.id}
    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout.splitlines()[-1])
    line = (
        f"TrainingJobInterrupted: Stopped waiting for training job {job.id}; it keeps running on the"
        f" server. Cancel it with handle.cancel() (or client.training_jobs.cancel('{job.id}')), or wait"
        " again with handle.wait()."
    )
    assert shown["stdout"].strip() == line and shown["stderr"] == ""
    script = "".join(shown["script"])
    assert script.rstrip().endswith(line) and "httpcore" not in script and "httpx" not in script
    assert script.count("Traceback") == 1  # the interrupt deep in the transport is not chained
    assert client.training_jobs.retrieve(job.id).status == "running"  # it kept running
    job.cancel()
    assert wait_job(client, job.id).status == "cancelled"


def test_the_interrupt_is_a_keyboard_interrupt_shown_in_one_line() -> None:
    interrupted = tk.TrainingJobInterrupted("job-1")
    assert isinstance(interrupted, KeyboardInterrupt) and interrupted.job_id == "job-1"
    assert interrupted._render_traceback_() == [f"TrainingJobInterrupted: {interrupted}"]
