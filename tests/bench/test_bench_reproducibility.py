"""bench/reproducibility.py runs (``--smoke``: servers on 1 and 2 torch threads, one SFT batch): each
seeded job trains byte-identical checkpoints in the two models of one server, and on 2 threads the
same checkpoints and tokens as on 1 (docs/training.md, "Thread counts"); the 1-thread server, the
reference, is compared with nothing."""

from __future__ import annotations

from bench_script import run_bench, table_rows


def test_bench_reproducibility_smoke_reports_each_job_per_thread_count() -> None:
    out = run_bench("reproducibility.py", "--smoke")
    header, *rows = table_rows(out)
    assert header[:6] == [
        "server",
        "job",
        "digest",
        "two models equal",
        "equal to",
        "max abs weight difference",
    ]
    jobs = ["SFT, every weight", "SFT, LoRA r=8", "RL, every weight"]
    gathers = ["seeded gather, 1 at a time", "seeded gather, 32 at once"]
    assert [(r[0], r[1]) for r in rows] == [(f"threads={t}", job) for t in (1, 2) for job in gathers + jobs]
    assert all(r[4] == "yes (tokens)" for r in rows if r[1] == gathers[1])  # batched: the same tokens
    trained = [r for r in rows if r[1] in jobs]
    assert all(r[3] == "yes" for r in trained)  # same server, same job and seed: the same bytes
    one, two = ([r for r in rows if r[0] == f"threads={t}" and r[1] != gathers[1]] for t in (1, 2))
    assert all(r[4] == "-" and r[5] == "-" for r in one)  # the reference itself
    assert all(r[4] == "yes (threads=1)" for r in two)  # the same tokens and checkpoints as on 1 thread
    assert all(r[5] == "0" for r in two if r[1] in jobs)
    assert [r[2] for r in one if r[1] in jobs] == [r[2] for r in two if r[1] in jobs]
    assert "CPU capability" in out
