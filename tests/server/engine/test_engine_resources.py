"""The torch thread count of the engine and the trainer: ``$TOOLKIT_TORCH_THREADS``, else 2."""

from __future__ import annotations

import pytest

from toolkit.server.engine.resources import DEFAULT_THREADS, torch_threads


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
