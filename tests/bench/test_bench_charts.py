"""bench/charts.py: a scaling figure is an SVG with one line per series, and the same data writes the
same file (no date in it), so a re-run changes docs/ only when the figures change."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from bench_script import ROOT


def charts():
    sys.path.insert(0, str(ROOT / "bench"))
    spec = importlib.util.spec_from_file_location("charts", ROOT / "bench" / "charts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_scaling_chart_is_a_deterministic_svg_with_each_series(tmp_path: Path) -> None:
    series = {"ingest": [(10_000, 1.2), (100_000, 11.0)], "scan": [(10_000, 0.1), (100_000, 0.9)]}
    kwargs = {"title": "Traces", "xlabel": "calls", "ylabel": "seconds"}
    first = charts().scaling_chart(tmp_path / "a.svg", series, **kwargs)
    second = charts().scaling_chart(tmp_path / "b.svg", series, **kwargs)
    text = first.read_text()
    assert text.startswith("<?xml") and "<svg" in text
    assert "ingest" in text and "scan" in text and "Traces" in text
    assert first.read_bytes() == second.read_bytes()
