"""The experiment's default seed (a stand-in with the names of CONTRACT §2; the ``seeds`` branch
brings the full module: derived rollout seeds and the calls that use this default)."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_DEFAULT: contextvars.ContextVar[int | None] = contextvars.ContextVar("toolkit_default_seed", default=None)


def default_seed() -> int | None:
    """The seed of the experiment open in this context (None outside one)."""
    return _DEFAULT.get()


@contextlib.contextmanager
def use_default_seed(seed: int | None) -> Iterator[None]:
    """Give ``seed`` as the default of every seeded call made in this context without a seed."""
    token = _DEFAULT.set(seed)
    try:
        yield
    finally:
        _DEFAULT.reset(token)
