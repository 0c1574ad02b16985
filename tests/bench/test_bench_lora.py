"""bench/bench_lora.py runs (``--smoke``: 2-layer models): each adapter spread, both training modes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_lora_smoke_reports_each_spread_and_mode() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_lora.py"),
            "--smoke",
            "--device",
            "cpu",
            "--threads",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    rows = [line.split("|")[1].strip() for line in out.stdout.splitlines() if line.startswith("| ")]
    assert rows == [
        "requests on",
        "base model alone",
        "1 adapter",
        "4 adapters, grouped",
        "4 adapters, gathered",
        "16 adapters, grouped",
        "16 adapters, gathered",
        "training",
        "LoRA r=8, 7 projections",
        "full fine-tuning",
    ]
    assert "on cpu (float32)" in out.stdout
