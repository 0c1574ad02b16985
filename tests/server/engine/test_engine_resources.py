"""The torch thread count of the engine and the trainer: ``$TOOLKIT_TORCH_THREADS``, else 2; and
the OpenMP spin waits ``toolkit serve`` shortens before torch loads, unless the user chose them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from toolkit.server.engine.resources import DEFAULT_THREADS, brief_spin_waits, torch_threads


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


def test_toolkit_serve_shortens_them_before_torch_loads(tmp_path: Path) -> None:
    """OpenMP reads its settings once, as torch loads it: what counts is the environment then."""
    probe = f"""
import os, sys
seen = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("GOMP_SPINCOUNT"))
        return None
sys.meta_path.insert(0, Watch())
from toolkit import cli
cli.main(["serve", "--device", "tpu", "--data-dir", {str(tmp_path)!r}])  # fails after torch loads
print(seen)
"""
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "['100']", out.stderr[-2000:]
