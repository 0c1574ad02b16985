"""A guided row with a continuation (``then``): a match may go on with matches of ``then``, which
outlines-core's own index of ``A(BA)*`` does not offer (only EOS once ``A`` matched)."""

from __future__ import annotations

from outlines_core import Guide

from toolkit.server.engine.codec import Codec
from toolkit.server.engine.structured import Compiler
from toolkit.server.engine.tokenizer import byte_tokenizer

CODEC = Codec(byte_tokenizer())
EOS = CODEC.encode("<|im_end|>")[0]


def allowed(mask: object) -> list[int]:
    return mask.nonzero().flatten().tolist()  # type: ignore[attr-defined]


def test_a_row_goes_on_with_its_continuation_any_number_of_times() -> None:
    compiler = Compiler(CODEC, EOS)
    try:
        row = compiler.row(compiler.index("a"), compiler.index("bc"))
        assert allowed(row.mask()) == [ord("a")]
        seen = []
        for token in "abcbc":
            row.advance(ord(token))
            seen.append(allowed(row.mask()))
        assert seen == [[ord("b"), EOS], [ord("c")], [ord("b"), EOS], [ord("c")], [ord("b"), EOS]]
        plain = compiler.row(compiler.index("a"))
        plain.advance(ord("a"))
        assert allowed(plain.mask()) == [EOS]
        repeated = Guide(compiler.index("a(bc)*"))
        repeated.advance(ord("a"))
        assert list(repeated.get_tokens()) == [EOS]  # why ``then`` exists
    finally:
        compiler.close()
