"""The first SFT job on a fresh server against the next ones: a server of its own in a temporary folder,
one model, then SFT jobs of the same size one after another, with no chat request before the first (a
user's first cell after ``models.create``). Prints each job's wall time (POST to checkpoint), its
gradient steps (the job's ``training_started`` to ``training_ended`` events), the server's CPU seconds,
and the ratio first / second; ``--chat-first`` sends one chat request to the base before the first job,
``--spincount`` sets the server's ``GOMP_SPINCOUNT`` (300000: libgomp's default, what the server ran
with before ``toolkit serve`` set 100).

    python bench/first_sft_job.py                    # 3 jobs of 20 batches of 16 (code lookup)
    python bench/first_sft_job.py --spincount 300000 # as before the spin-wait fix
    python bench/first_sft_job.py --smoke            # 2 jobs of 2 batches (CI)
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from server_process import start_server

import toolkit as tk
from toolkit.tasks import lookup

BASE_MODEL = "toolkit/tiny-chat-1m"


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gradient_seconds(client: tk.Client, job_id: str) -> float:
    """From the job's ``training_started`` event to its ``training_ended``."""
    events = {e.type: e.created_at for e in client.training_jobs.events.list(job_id, limit=100)}
    return (events["training_ended"] - events["training_started"]).total_seconds()


def measure(args: argparse.Namespace) -> list[dict[str, float]]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="first-sft-") as folder:
        env = {"GOMP_SPINCOUNT": str(args.spincount)} if args.spincount is not None else None
        proc, url, key = start_server(Path(folder), env)
        try:
            with tk.Client(url, key) as client:
                model = client.models.create(project="bench", name="first-sft", base_model=BASE_MODEL)
                if args.chat_first:
                    client.chat.completions.create(
                        model=BASE_MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2
                    )
                for k in range(args.jobs):
                    started, cpu = time.perf_counter(), cpu_seconds(proc.pid)
                    job = client.sft_training_jobs.create_from_data(
                        model_id=model.id,
                        data=lookup.demonstrations(args.batch_size * args.batches, seed=k),
                        config={"batch_size": args.batch_size, "learning_rate": 1e-3},
                    )
                    job.wait(progress=False)
                    rows.append(
                        {
                            "wall_s": time.perf_counter() - started,
                            "gradient_s": gradient_seconds(client, job.id),
                            "cpu_s": cpu_seconds(proc.pid) - cpu,
                            "load": os.getloadavg()[0],
                        }
                    )
        finally:
            proc.terminate()
            proc.wait(30)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--chat-first", action="store_true", help="one chat request to the base first")
    parser.add_argument("--spincount", type=int, help="the server's GOMP_SPINCOUNT")
    parser.add_argument("--smoke", action="store_true", help="2 jobs of 2 batches of 4 (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.jobs, args.batches, args.batch_size = 2, 2, 4
    rows = measure(args)
    for k, row in enumerate(rows):
        print(
            f"job {k + 1}: {row['wall_s']:.2f} s wall, {row['gradient_s']:.2f} s gradient steps, "
            f"{row['cpu_s']:.2f} s server CPU (load {row['load']:.1f})"
        )
    first, second = rows[0], rows[1]
    print(
        f"first / second job: wall {first['wall_s'] / second['wall_s']:.2f}x, "
        f"CPU {first['cpu_s'] / second['cpu_s']:.2f}x"
    )


if __name__ == "__main__":
    main()
