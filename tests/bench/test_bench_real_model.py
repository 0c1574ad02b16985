"""bench/real_model.py runs (``--smoke``, on the tiny built-in model with a LoRA adapter: the real
model's figures are docs/performance.md's): decode against ``generate`` with the same greedy tokens in
float32, time to the first token, LoRA training through the API against the bare peft loop, a whole RL
step, the server's peak memory; every figure positive and each ratio the one of its figures."""

from __future__ import annotations

import re

import pytest
from bench_script import run_bench, table_rows


def number(cell: str) -> float:
    return float(cell.strip("*x%"))


def test_real_model_smoke_compares_decode_and_training_with_their_peers() -> None:
    out = run_bench("real_model.py", "--smoke", "--base-model", "toolkit/tiny-chat-1m", "--threads", "1")
    out = out[out.index("## The real model on the CPU") :]  # the report (rows print as they come, too)
    decode, training = [], []
    for row in table_rows(out):
        if row[0].isdigit():
            decode.append(row)
        elif row[0].startswith(("SFT", "RL")):
            training.append(row)
    assert [row[0] for row in decode] == ["1", "2"]
    for _, engine, peer, ratio, engine_cpu, peer_cpu, cpu_ratio, same in decode:
        assert min(map(number, (engine, peer, engine_cpu, peer_cpu))) > 0
        assert number(ratio) == pytest.approx(number(engine) / number(peer), abs=0.01)
        assert number(cpu_ratio) == pytest.approx(number(engine_cpu) / number(peer_cpu), abs=0.01)
        assert same == "100%"  # float32: the engine's greedy tokens are generate's
    assert [row[0][:3] for row in training] == ["SFT", "RL,"]
    for _, api, steps, bare, ratio in training:
        assert 0 < number(steps) <= number(api) and number(bare) > 0
        assert number(ratio) == pytest.approx(number(api) / number(bare), rel=0.15)  # of 2-decimal figures
    first = re.search(
        r"first token of one streamed request: (\d+) ms \(generate of one token: (\d+) ms\)", out
    )
    whole = re.search(r"rollouts .* and ([\d.]+) s for the job: \*\*([\d.]+) s\*\*", out)
    peak = re.search(r"peak resident memory over the run: ([\d.]+) GiB", out)
    assert first and whole and peak
    agreed = re.search(r"Answers to 16 questions: (\d+) of 16 greedy answers identical", out)
    assert agreed and agreed[1] == "16"  # float32 on both sides
    assert int(first[1]) > 0 and int(first[2]) > 0 and float(whole[2]) >= float(whole[1]) > 0
    assert 0.1 < float(peak[1]) < 8
