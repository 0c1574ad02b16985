"""Seeds derived from one seed, so that a run samples the same tokens however its requests interleave.

- :func:`derive_seed` hashes its parts (ints and strings) into a 63-bit seed, the same on every
  machine and Python version: the seed of rollout ``(group g, member r)`` of a gather seeded ``s``
  is ``derive_seed(s, g, r)``, whatever order the rollouts run in.
- Inside a seeded rollout (:func:`rollout_seed`) the client's ``n``-th chat request (n = 0, 1, ...)
  that has no ``seed`` of its own asks for ``derive_seed(rollout_seed, n)`` (:func:`request_seed`).
- :func:`use_default_seed` (what ``tk.experiment(..., seed=s)`` opens) gives a default to every
  seeded call made without a ``seed``: the ``k``-th such call gets ``derive_seed(s, kind, k)``
  (:func:`resolve`), so a notebook run again in the same order draws the same numbers.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

SEED_BITS = 63  # fits every seed field (int64) and torch.manual_seed


def derive_seed(*parts: int | str) -> int:
    """A stable seed in ``[0, 2**63)`` from ``parts`` (blake2b of their typed, length-prefixed text:
    ``1`` and ``"1"`` differ, as do ``("ab", "c")`` and ``("a", "bc")``)."""
    digest = hashlib.blake2b(digest_size=8, person=b"toolkit-seed")
    for part in parts:
        if isinstance(part, bool) or not isinstance(part, int | str):
            raise TypeError(f"a seed is derived from ints and strings, not {type(part).__name__}")
        text = f"{'i' if isinstance(part, int) else 's'}{part}".encode()
        digest.update(len(text).to_bytes(4, "little") + text)
    return int.from_bytes(digest.digest(), "little") >> (64 - SEED_BITS)


@dataclass
class _Scope:
    seed: int
    counter: Iterator[int] = field(default_factory=itertools.count)  # next() is atomic in CPython


_ROLLOUT: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("toolkit_rollout_seed", default=None)
_DEFAULT: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar("toolkit_default_seed", default=None)


def current_seed() -> int | None:
    """The seed of the rollout running in this context (None outside a seeded rollout)."""
    scope = _ROLLOUT.get()
    return None if scope is None else scope.seed


@contextlib.contextmanager
def rollout_seed(seed: int | None) -> Iterator[None]:
    """Run a rollout under ``seed`` (None: unseeded): its chat requests are numbered from 0."""
    token = _ROLLOUT.set(None if seed is None else _Scope(seed))
    try:
        yield
    finally:
        _ROLLOUT.reset(token)


def request_seed() -> int | None:
    """The seed of the next chat request of the current rollout, ``derive_seed(rollout_seed, n)``
    for its ``n``-th request (None outside a seeded rollout)."""
    scope = _ROLLOUT.get()
    return None if scope is None else derive_seed(scope.seed, next(scope.counter))


def default_seed() -> int | None:
    """The seed of the experiment open in this context (None outside one)."""
    scope = _DEFAULT.get()
    return None if scope is None else scope.seed


@contextlib.contextmanager
def use_default_seed(seed: int | None) -> Iterator[None]:
    """Give ``seed`` as the default of every seeded call made in this context without a seed."""
    token = _DEFAULT.set(None if seed is None else _Scope(seed))
    try:
        yield
    finally:
        _DEFAULT.reset(token)


def resolve(seed: int | None, kind: str) -> int | None:
    """The seed a call of ``kind`` (``"gather"``, ``"scenarios"``, ...) uses: ``seed`` when given,
    else ``derive_seed(default, kind, k)`` for the ``k``-th such call under a default seed, else None."""
    if seed is not None:
        return seed
    scope = _DEFAULT.get()
    return None if scope is None else derive_seed(scope.seed, kind, next(scope.counter))


def rng(seed: int | None, kind: str) -> random.Random:
    """A ``random.Random`` seeded by :func:`resolve` (from the system's entropy when that is None)."""
    return random.Random(resolve(seed, kind))
