"""Text <-> token ids for the served model: encoding, (incremental) decoding, per-token strings and bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from tokenizers import Tokenizer

from .tokenizer import bytes_to_unicode

REPLACEMENT = "\ufffd"


class Codec:
    """Wraps a ``tokenizers.Tokenizer`` with the decoding options of the chat API."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tok = tokenizer
        added = tokenizer.get_added_tokens_decoder()
        self.special_ids = frozenset(i for i, t in added.items() if t.special)
        self.vocab_size = tokenizer.get_vocab_size()

    @classmethod
    def from_folder(cls, folder: Path) -> Codec:
        return cls(Tokenizer.from_file(str(folder / "tokenizer.json")))

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = True, spaces_between: bool = True) -> str:
        """Decode; kept special tokens are joined to the text with a space if ``spaces_between``."""
        if skip_special_tokens or not any(i in self.special_ids for i in ids):
            return str(self.tok.decode([i for i in ids if i not in self.special_ids]))
        parts: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in self.special_ids:
                if run:
                    parts.append(self.tok.decode(run))
                    run = []
                parts.append(self.tok.id_to_token(i) or "")
            else:
                run.append(i)
        if run:
            parts.append(self.tok.decode(run))
        return (" " if spaces_between else "").join(parts)

    def token_text(self, token_id: int, previous: list[int] | None = None) -> str:
        """One token as text (special tokens by name); a partial UTF-8 sequence is completed with up
        to 4 previous tokens, else it decodes to ``""``."""
        if token_id in self.special_ids:
            return str(self.tok.id_to_token(token_id))
        text = str(self.tok.decode([token_id]))
        if not text.endswith(REPLACEMENT) or not previous:
            return "" if text.endswith(REPLACEMENT) else text
        for k in range(1, min(4, len(previous)) + 1):
            head = self.tok.decode(previous[-k:]).rstrip(REPLACEMENT)
            full = self.tok.decode([*previous[-k:], token_id])
            if not full.endswith(REPLACEMENT) and full.startswith(head):
                return str(full[len(head) :])
        return ""

    @cached_property
    def token_bytes(self) -> dict[bytes, list[int]]:
        """Each ordinary token's raw bytes (byte-level BPE and SentencePiece byte-fallback vocabularies)."""
        byte_map = _unicode_to_bytes()
        out: dict[bytes, list[int]] = {}
        for token, i in self.tok.get_vocab(with_added_tokens=False).items():
            if i in self.special_ids:
                continue
            if token.startswith("<0x") and token.endswith(">") and len(token) == 6:
                raw = bytes([int(token[3:5], 16)])
            elif all(c in byte_map for c in token):
                raw = bytes(byte_map[c] for c in token)
            else:
                raw = token.replace("\u2581", " ").encode()
            out.setdefault(raw, []).append(i)
        return out


def _unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


@dataclass
class IncrementalText:
    """Turns a growing list of token ids into text deltas without re-decoding everything."""

    codec: Codec
    skip_special_tokens: bool = True
    spaces_between: bool = True
    ids: list[int] = field(default_factory=list)
    prefix_offset: int = 0
    read_offset: int = 0

    def _decode(self, ids: list[int]) -> str:
        return self.codec.decode(ids, self.skip_special_tokens, self.spaces_between)

    def push(self, token_id: int) -> str:
        """Append a token; return the newly complete text (``""`` while a UTF-8 sequence is partial)."""
        self.ids.append(token_id)
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        if len(full) > len(prefix) and not full.endswith(REPLACEMENT):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return full[len(prefix) :]
        return ""

    def flush(self) -> str:
        """Whatever is still held back (an incomplete UTF-8 tail) at the end of generation."""
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        full = self._decode(self.ids[self.prefix_offset :])
        self.prefix_offset = self.read_offset = len(self.ids)
        return full[len(prefix) :] if len(full) > len(prefix) else ""
