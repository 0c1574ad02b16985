"""The values of ``toolkit serve``'s options (argparse types: seconds, bytes, counts) and its
``--config`` file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

LIST_OPTIONS = ("base_model", "lora_modules")


def _seconds(value: str) -> float:
    """A number of seconds, 0 or more (argparse type)."""
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {value!r}") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds >= 0, got {value!r}")
    return seconds


_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}


def _bytes(value: str) -> int:
    """A number of bytes, with an optional unit: K, M, G (powers of 10) or Ki, Mi, Gi (of 2)."""
    text = str(value).strip().lower().removesuffix("b")
    number = text.rstrip("kmgi")
    unit = _UNITS.get(text[len(number) :])
    try:
        amount = float(number) * unit if unit is not None else -1.0
    except ValueError:
        amount = -1.0
    if not 0 < amount < float("inf"):
        raise argparse.ArgumentTypeError(
            f"expected a positive number of bytes (e.g. 2147483648 or 2GiB), got {value!r}"
        )
    return int(amount)


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return number


def _positive_seconds(value: str) -> float:
    seconds = _seconds(value)
    if seconds == 0:
        raise argparse.ArgumentTypeError("expected a number of seconds > 0, got 0")
    return seconds


def serve_config(path: str, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The options of a ``--config`` file (YAML or JSON: long option names as keys, values as on the
    command line, lists for ``base-model`` and ``lora-modules``; a base model may be a mapping
    ``{source, names, chat-template}``), as argparse destinations. An option also given on the
    command line takes the command line's value."""
    import yaml

    try:
        loaded = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        parser.error(f"--config {path}: {exc}")
    if not isinstance(loaded, dict):
        parser.error(f"--config {path}: expected a mapping of option names to values")
    known = {a.dest for a in parser._actions}
    options: dict[str, Any] = {}
    for key, value in loaded.items():
        dest = str(key).removeprefix("--").replace("-", "_")
        if dest not in known or dest in ("help", "config"):
            parser.error(f"--config {path}: unknown option {key!r}")
        if dest in LIST_OPTIONS:  # a base model may also be a mapping (sources.BaseSource.from_mapping)
            values = value if isinstance(value, list) else [value]
            value = [v if isinstance(v, dict) and dest == "base_model" else str(v) for v in values]
        options[dest] = value
    return options
