"""Where served models come from, and the names they are served under.

``--base-model SOURCE[=NAME[,NAME...]]``: a hub id is looked up in huggingface_hub's cache first
(``HF_HUB_CACHE``, no network), then downloaded unless ``HF_HUB_OFFLINE`` is set; a folder is used
as it is. Without names, a hub id is served under itself and a folder under its own name; with
names, under those only (the first is the model's canonical name), as vLLM's
``--served-model-name`` does.

``--chat-template FILE`` (vLLM's option: a file, or the template itself in one line) replaces the
template of the one ``--base-model``; in ``--config``, a base given as a mapping carries its own
(``{source, names?, chat-template?}``).

``--lora-modules NAME=PATH`` (or vLLM's JSON form ``{"name", "path", "base_model_name"}``): a peft
adapter folder served under ``NAME`` on a base model (default: the first).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import constants, snapshot_download

from .template import TemplateError, check_template

# what serving and training read from a hub snapshot (weights, configs, tokenizer, template)
HUB_FILES = ["*.json", "*.safetensors", "*.jinja", "*.txt", "*.model"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class BaseModelError(ValueError):
    """A base model that cannot be served; the message is one line saying why."""


@dataclass(frozen=True)
class BaseSource:
    """One ``--base-model`` value: a hub id, folder or built-in name, the names it is served under,
    and the chat template that replaces its own, if any."""

    source: str
    names: tuple[str, ...] = ()
    chat_template: str | None = None

    @classmethod
    def parse(cls, text: str) -> BaseSource:
        """``SOURCE``, ``SOURCE=NAME`` or ``SOURCE=NAME1,NAME2``."""
        source, _, names = text.partition("=")
        aliases = tuple(n.strip() for n in names.split(",")) if names else ()
        if not source.strip() or any(not n for n in aliases):
            raise BaseModelError(f"--base-model {text!r}: expected SOURCE or SOURCE=NAME[,NAME...]")
        return cls(source.strip(), aliases)

    @classmethod
    def from_mapping(cls, item: dict[str, Any]) -> BaseSource:
        """A ``--config`` entry ``{source, names?, chat-template?}`` (``names``: a list, or names
        separated by commas)."""
        unknown = sorted(set(item) - {"source", "names", "chat-template"})
        if unknown or not isinstance(item.get("source"), str):
            raise BaseModelError(
                f"base-model {item!r}: expected a mapping of source and, optionally, names and chat-template"
            )
        names = item.get("names") or []
        names = names.split(",") if isinstance(names, str) else [str(n) for n in names]
        source = cls.parse(item["source"] + ("=" + ",".join(names) if names else ""))
        template = item.get("chat-template")
        return cls(source.source, source.names, read_template(str(template)) if template else None)

    def is_hub_id(self) -> bool:
        return not Path(self.source).expanduser().exists() and bool(_HUB_ID.match(self.source))

    def served_names(self, folder: Path) -> tuple[str, ...]:
        if self.names:
            return self.names
        return (self.source,) if self.is_hub_id() else (folder.name,)


def read_template(value: str) -> str:
    """A ``--chat-template`` value as vLLM reads it: a file's text, else the value itself when it is
    a template in one line; checked to compile (jinja2's sandbox)."""
    path = Path(value).expanduser()
    if path.is_file():
        text = path.read_text()
    elif "{{" in value or "{%" in value:
        text = value
    else:
        raise BaseModelError(f"--chat-template {value!r}: no such file, and not a template")
    try:
        check_template(text)
    except TemplateError as exc:
        raise BaseModelError(f"--chat-template {value!r}: {exc}") from None
    return text


@dataclass(frozen=True)
class AdapterSource:
    """One ``--lora-modules`` value: an adapter folder, its served name and its base's name."""

    name: str
    folder: Path
    base: str | None = None  # a served base name; None: the first base

    @classmethod
    def parse(cls, text: str) -> AdapterSource:
        """``NAME=PATH`` or ``{"name": ..., "path": ..., "base_model_name": ...}``."""
        if text.lstrip().startswith("{"):
            try:
                item = json.loads(text)
                name, path, base = item["name"], item["path"], item.get("base_model_name")
            except (ValueError, KeyError, TypeError):
                raise BaseModelError(f"--lora-modules {text!r}: expected JSON with name and path") from None
        else:
            name, _, path = text.partition("=")
            base = None
        if not name or not path:
            raise BaseModelError(f"--lora-modules {text!r}: expected NAME=PATH")
        folder = Path(path).expanduser().resolve()
        if not (folder / "adapter_config.json").is_file():
            raise BaseModelError(f"--lora-modules {name}: {folder} has no adapter_config.json")
        return cls(str(name), folder, str(base) if base else None)


def resolve_folder(source: BaseSource, *, cache_dir: str | Path | None = None) -> Path:
    """The folder holding ``source``'s files (a hub id's cached snapshot, downloaded if allowed)."""
    path = Path(source.source).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists() or not source.is_hub_id():
        raise BaseModelError(f"base model {source.source!r}: no such folder, and not a hub id (org/name)")
    cache = Path(cache_dir) if cache_dir is not None else Path(constants.HF_HUB_CACHE)
    try:
        return Path(
            snapshot_download(source.source, cache_dir=cache, local_files_only=True, allow_patterns=HUB_FILES)
        )
    except (FileNotFoundError, ValueError):
        pass
    if constants.HF_HUB_OFFLINE:
        raise BaseModelError(
            f"base model {source.source!r} is not in the Hugging Face cache ({cache}) and HF_HUB_OFFLINE "
            "is set, so it cannot be downloaded: download it once online, or serve a folder"
        )
    try:
        return Path(snapshot_download(source.source, cache_dir=cache, allow_patterns=HUB_FILES))
    except Exception as exc:  # network, auth, missing repository: all end in the same one-line error
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BaseModelError(
            f"base model {source.source!r} is not in the Hugging Face cache ({cache}) and could not be "
            f"downloaded: {reason}"
        ) from None
