"""Which engine and weights a request's ``model`` names: a base model, an adapter served by name, or
a checkpoint of one of the user's models (a LoRA adapter or whole weights, on its base model).

Names: a base model's name (or none: the first base), an adapter's ``--lora-modules`` name,
``<name|id>[:step<N>|:latest]``, and
``wandb-artifact:///<entity>/<project>/<name>[:step<N>|:latest]`` as ART clients send. A bare name is
unique per entity and project only: when the user has it in several projects, the request's
``OpenAI-Project`` header (``team/project``, or ``project``) chooses among them; otherwise the answer
is a 400 naming each candidate in its ``wandb-artifact:///`` form, never a silent pick. A name that
serves nothing is vLLM's 404 (``The model `X` does not exist.``) followed by what is served: the base
models (as ``POST /v1/preview/models`` lists them for an unknown base), adapters and the user's models.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from ...types.training import Model
from ..engine.engine import Engine
from ..engine.lora import checkpoint_kind
from ..engine.model import serve_hint
from ..engine.request import Weights
from ..errors import BadRequest, NotFound
from ..store.users import User
from .context import ChatContext
from .external import checkpoint_name

ARTIFACT_PREFIX = "wandb-artifact:///"
LISTED_MODELS = 20  # of the user's models, the newest named in a 404 (GET /v1/models lists all)
_STEP = re.compile(r"^(?P<name>.+?)(?P<suffix>:(?:step(?P<step>\d+)|latest))$")


class Resolved(NamedTuple):
    engine: Engine
    weights: Weights
    # the name an external inference server serves these weights under: the base's name, an
    # adapter's ``--lora-modules`` name, or ``<model_id>:step<N>`` for a checkpoint (chat/external.py)
    served_name: str


def resolve_model(chat: ChatContext, user: User, name: str | None, project: str | None = None) -> Resolved:
    """The engine and weights ``name`` serves; ``project`` is the ``OpenAI-Project`` header, if any.

    Unknown or deleted: 404 as vLLM answers it; a bare name in several projects: 400 (see module)."""
    served = chat.served
    if not name:
        return Resolved(served.default, Weights("base"), served.default.spec.name)
    base = served.engine(name)
    if base is not None:
        return Resolved(base, Weights("base"), base.spec.name)
    adapter = served.adapters.get(name)
    if adapter is not None:
        return Resolved(adapter.engine, adapter.weights, adapter.name)
    missing = unknown_model(chat, user, name)
    if name.startswith(ARTIFACT_PREFIX):
        parts = name[len(ARTIFACT_PREFIX) :].split("/")
        if len(parts) != 3 or not all(parts):
            raise missing
        entity, project_name, ref = parts
        ref, suffix, step = _split_step(ref)
        model = chat.models.find(user, entity=entity, project=project_name, name=ref)
    else:
        ref, suffix, step = _split_step(name)
        model = _by_name(chat, user, ref, suffix, project)
        if model is None:
            try:
                model = chat.models.get(user, ref)
            except NotFound:
                model = None
    engine = served.engine(model.base_model) if model is not None else None
    if model is None or engine is None:
        raise missing
    row = (
        chat.models.checkpoint_at(model.id, step)
        if step is not None
        else chat.models.latest_checkpoint(model.id)
    )
    if row is None:
        raise missing
    if row.path is None:
        return Resolved(engine, Weights("base"), engine.spec.name)
    folder = Path(row.path)
    if checkpoint_kind(folder) is None:
        raise missing
    return Resolved(
        engine, Weights(row.id, folder, (model.id, row.step)), checkpoint_name(model.id, row.step)
    )


def served_names(names: Iterable[str]) -> str:
    """``served: a, b``: the served base models, as the 404 of a chat and the 422 of an unknown base
    in ``POST /v1/preview/models`` list them."""
    return f"served: {', '.join(names)}"


def unknown_model(chat: ChatContext, user: User, name: str) -> NotFound:
    """vLLM's 404 for ``name``, then what is served: bases, ``--lora-modules`` adapters and the
    user's models on a served base (the newest :data:`LISTED_MODELS`)."""
    served = chat.served
    newest = reversed([m.name for m in chat.models.all(user) if served.engine(m.base_model)])
    mine = list(dict.fromkeys(newest))
    listed = [*served.specs, *served.adapters, *mine[:LISTED_MODELS]]
    more = f" and {len(mine) - LISTED_MODELS} more" if len(mine) > LISTED_MODELS else ""
    steps = " (a model's checkpoints as <name>:step<N>)" if mine else ""
    hint = serve_hint(name)
    return NotFound(
        f"The model `{name}` does not exist; {served_names(listed)}{more}{steps}."
        + (f" {hint}." if hint else ""),
        param="model",
    )


def artifact_name(model: Model, suffix: str = "") -> str:
    """``wandb-artifact:///<entity>/<project>/<name><suffix>``: the name that is never ambiguous."""
    return f"{ARTIFACT_PREFIX}{model.entity}/{model.project}/{model.name}{suffix}"


def _split_step(ref: str) -> tuple[str, str, int | None]:
    """``name:step3`` -> ("name", ":step3", 3); ``name:latest`` -> ("name", ":latest", None)."""
    match = _STEP.match(ref)
    if match is None:
        return ref, "", None
    step = match["step"]
    return match["name"], match["suffix"], int(step) if step is not None else None


def _by_name(chat: ChatContext, user: User, name: str, suffix: str, project: str | None) -> Model | None:
    """The user's served model called ``name``: the only one, or the one in the header's project."""
    served = chat.served
    candidates = [m for m in chat.models.all(user) if m.name == name and served.engine(m.base_model)]
    if len(candidates) > 1 and project and project.strip():
        entity, _, project_name = project.strip().rpartition("/")
        within = [m for m in candidates if m.project == project_name and entity in ("", m.entity)]
        candidates = within or candidates
    if len(candidates) > 1:
        names = ", ".join(artifact_name(m, suffix) for m in candidates)
        raise BadRequest(
            f"The model name `{name}{suffix}` matches models in several projects: {names}. Send one of "
            "these names, or the header `OpenAI-Project: <entity>/<project>` naming the project.",
            param="model",
        )
    return candidates[0] if candidates else None
