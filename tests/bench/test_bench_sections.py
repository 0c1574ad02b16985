"""bench/learning_runs.py ``write_section``: a benchmark rewrites its own section of docs/performance.md
and nothing else, its subsections included."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from bench_script import ROOT


def learning_runs(monkeypatch: pytest.MonkeyPatch, root: Path) -> ModuleType:
    monkeypatch.syspath_prepend(str(ROOT / "bench"))  # its imports of the other benches' modules
    spec = importlib.util.spec_from_file_location("learning_runs", ROOT / "bench" / "learning_runs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "learning_runs", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ROOT", root)
    return module


def test_a_section_is_replaced_up_to_the_next_heading_and_subsections_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = learning_runs(monkeypatch, tmp_path)
    doc = tmp_path / "docs" / "performance.md"
    doc.parent.mkdir()
    doc.write_text("# Performance\n\n## A\n\nold A\n\n### A detail\n\nkept\n\n## B\n\nold B\n")
    runs.write_section("## A", "## A\n\nnew A\n")
    assert doc.read_text() == "# Performance\n\n## A\n\nnew A\n\n### A detail\n\nkept\n\n## B\n\nold B\n"
    runs.write_section("## B", "## B\n\nnew B\n")
    assert doc.read_text().endswith("## B\n\nnew B\n")
    runs.write_section("## C", "## C\n\nnew C\n")
    assert doc.read_text().endswith("## B\n\nnew B\n\n## C\n\nnew C\n")
