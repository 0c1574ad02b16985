"""bench/gpu.py runs end to end on the CPU (``--smoke --device cpu``: a 2-layer model, 4 tokens): every
measure is a real figure (positive and finite, both sides of each ratio, ``generate`` with a static
cache beside the eager one), device sampling picks the tokens sampling on the CPU picks, the decode
step at fixed shapes picks the plain step's tokens, and every check of where things ran passes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench_script import run_bench, table_rows


def positive(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def test_bench_gpu_smoke_measures_every_figure_on_the_cpu(tmp_path: Path) -> None:
    out = run_bench("gpu.py", "--device", "cpu", "--smoke", "--out", str(tmp_path / "gpu.json"))
    report = json.loads((tmp_path / "gpu.json").read_text())
    assert report["errors"] == {} and "ERROR" not in out
    assert report["device"] == "cpu" and report["model"]["parameters"] > 0
    figures = report["figures"]

    decode = figures["decode_tokens_per_s"]
    assert set(decode) == {
        "engine greedy",
        "engine T=1",
        "device sampling greedy",
        "device sampling T=1",
        "generate",
        "generate, static cache",
    }
    for label, rates in decode.items():
        assert list(rates) == ["1", "2", "4"], label
        assert all(positive(rate) for rate in rates.values()), (label, rates)

    assert [r["batch"] for r in figures["sampling"]] == [1, 2, 4]
    for r in figures["sampling"]:
        timings = {k: v for k, v in r.items() if k.endswith("_ms")}
        assert len(timings) == 10 and all(positive(v) for v in timings.values()), r
        assert r["vocab"] == 260 and r["same_tokens"] == r["tokens_compared"] == 2 * 2 * r["batch"]
        assert r["device_random_same"] == r["device_random_compared"] == 2 * r["batch"]

    assert list(figures["static_generate_first_call_s"]) == ["1", "2", "4"]
    assert all(positive(s) for s in figures["static_generate_first_call_s"].values())

    # one decode step's forward as it comes and at fixed shapes (no CUDA graphs on the CPU): real
    # times, the same greedy tokens, and the graph checks marked as not run here
    assert [r["batch"] for r in figures["graphs"]] == [1, 2, 4]
    for r in figures["graphs"]:
        assert positive(r["plain_ms"]) and positive(r["eager_ms"]) and "graphs_ms" not in r, r
        assert r["plain_tokens_same"] and r["plain_max_abs_diff"] < 1e-4, r
    graph_checks = [c for c in report["checks"] if "CUDA graphs replay" in c["check"]]
    assert len(graph_checks) == 3 and all(c["ok"] is None for c in graph_checks)

    adapters = figures["adapters"]
    assert adapters["requests"] == 2 and all(positive(v) for v in adapters["tokens_per_s"].values())

    assert set(figures["training"]) == {"SFT", "RL"}
    for job in figures["training"].values():
        assert positive(job["api_s"]) and positive(job["bare_s"]) and positive(job["ratio"])
        assert job["gradient_steps"] >= 1 and positive(job["phases_s"]["gradient steps"])

    memory = report["memory_mib"]
    servers = [k for k in memory if "server" in k]
    assert len(servers) == 5 and all(positive(memory[k]) for k in servers)
    checks = {c["check"]: c["ok"] for c in report["checks"]}
    assert all(ok in (True, None) for ok in checks.values()), report["checks"]
    assert checks["plain server: /v1/health device"] and checks["device-sampling server: /v1/health device"]
    assert checks["bare SFT peft loop's model"] and checks["bare RL peft loop's model"]
    assert all(positive(s) for s in report["seconds"].values())

    rows = table_rows(out)
    headers = {row[0] for row in rows}
    assert [row[1] for row in rows if row[0] == "batch"] == [
        "forward ms",
        "as it comes, ms",
    ]  # sampling, graphs
    assert {
        "concurrent requests / batch",
        "batch",
        "2 concurrent requests on",
        "job (rank 8, 7 projections)",
        "memory on the device",
        "nothing ran on the CPU unasked",
    } <= headers
    assert {"the base alone", "2 adapters, one each", "LoRA SFT", "LoRA RL"} <= headers
    assert [row[-1] for row in rows if row[0] in checks] == [
        "n/a" if checks[row[0]] is None else "yes" for row in rows if row[0] in checks
    ]
