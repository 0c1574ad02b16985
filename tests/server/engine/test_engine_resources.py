"""The torch thread count of the engine and the trainer: ``$TOOLKIT_TORCH_THREADS``, else 2; and
what ``toolkit serve`` sets before torch loads, unless the user chose: brief OpenMP spin waits, and
huge pages for torch's allocations of 2 MB or more."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.server.engine.resources import DEFAULT_THREADS, brief_spin_waits, huge_pages, torch_threads


def test_unset_or_blank_gives_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLKIT_TORCH_THREADS", raising=False)
    assert torch_threads() == DEFAULT_THREADS == 2
    monkeypatch.setenv("TOOLKIT_TORCH_THREADS", " ")
    assert torch_threads() == DEFAULT_THREADS


def test_a_count_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLKIT_TORCH_THREADS", "3")
    assert torch_threads() == 3


@pytest.mark.parametrize("raw", ["0", "-1", "two", "1.5"])
def test_a_bad_value_is_an_error_that_names_it(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("TOOLKIT_TORCH_THREADS", raw)
    with pytest.raises(ValueError, match=f"TOOLKIT_TORCH_THREADS.*{raw!r}"):
        torch_threads()


def test_spin_waits_are_brief_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        monkeypatch.delenv(name, raising=False)
    brief_spin_waits()
    assert os.environ["GOMP_SPINCOUNT"] == "100"
    monkeypatch.setenv("GOMP_SPINCOUNT", "300000")
    brief_spin_waits()
    assert os.environ["GOMP_SPINCOUNT"] == "300000"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    brief_spin_waits()
    assert "GOMP_SPINCOUNT" not in os.environ


def test_toolkit_serve_sets_them_before_torch_loads(tmp_path: Path) -> None:
    """OpenMP and torch read their settings once, as torch loads: what counts is the environment then."""
    probe = f"""
import os, sys
seen = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append((os.environ.get("GOMP_SPINCOUNT"), os.environ.get("THP_MEM_ALLOC_ENABLE")))
        return None
sys.meta_path.insert(0, Watch())
from toolkit import cli
cli.main(["serve", "--device", "tpu", "--data-dir", {str(tmp_path)!r}])  # fails after torch loads
print(seen)
"""
    unset = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "THP_MEM_ALLOC_ENABLE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "[('100', '1')]", out.stderr[-2000:]


def test_huge_pages_unless_the_user_chose(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    huge_pages()
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "1"
    monkeypatch.setenv("THP_MEM_ALLOC_ENABLE", "0")
    huge_pages()
    assert os.environ["THP_MEM_ALLOC_ENABLE"] == "0"
