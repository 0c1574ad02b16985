"""Text as the toolkit shows it: characters that draw nothing, or draw a line break where the text
has none, written as their Python escapes, so a random model's control bytes read as ``\\x0b`` rather
than as thirty blank lines or an empty cell."""

from __future__ import annotations

import re

# C0 controls but tab and newline (a carriage return only when no newline follows it), DEL, the C1
# controls (NEL among them) and Unicode's line and paragraph separators
INVISIBLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029]|\r(?!\n)")


def escape(match: re.Match[str]) -> str:
    """The Python escape of a matched character (``\\x0b``, ``\\r``, ``\\u2028``)."""
    return match.group().encode("unicode_escape").decode("ascii")


def visible(text: str) -> str:
    """``text`` with every :data:`INVISIBLE` character written as its escape; other text unchanged."""
    return INVISIBLE.sub(escape, text)
