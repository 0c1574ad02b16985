"""``replay(..., resample=True)``: the seeded chat completions recorded under the experiment, sent
again to the replayed checkpoints (same messages, parameters and seed) as soon as the replay reaches
the step they were sampled from, their choices compared with the recorded ones. Rewards and the
environment's turns come from rollout code the file does not hold: the jobs still train on the
recorded groups."""

from __future__ import annotations

import re
from typing import Any

from ..client import Client, UnsupportedOperation
from ..types.experiments import ExperimentRecord, Sample
from ..types.records import canonical_json, sha256_hex
from ..types.training import Model
from .experiment import ARTIFACT_PREFIX, sampled

_STEP = re.compile(r"^(?P<head>.+?):step(?P<step>\d+)$")
Key = tuple[str | None, int | None]  # (recorded model id, step); (None, None): a base model


class Resampler:
    """The recorded samples by the checkpoint they came from, sent again as the replay reaches it.
    Only a checkpoint of a recorded model and a base model the replay's deployment serves can be
    sampled again; any other model (a checkpoint trained outside the experiment, a model named
    without a step) is not re-derivable, and its samples are counted in the notes."""

    def __init__(self, record: ExperimentRecord, client: Client, made: dict[str, Model]) -> None:
        self.client = client
        self.made = made  # recorded model id -> the replay's model
        names: dict[str, str] = {}
        for entry in record.models:
            m = entry.model
            names |= {m.id: m.id, m.name: m.id, f"{m.entity}/{m.project}/{m.name}": m.id}
        bases = _bases(client) | {entry.model.base_model for entry in record.models}
        self.pending: dict[Key, list[Sample]] = {}
        self.skipped = 0  # samples of a recorded model named without a step (``:latest``)
        self.outside: dict[str, int] = {}  # samples of models neither recorded nor a base, by name
        for sample in record.samples:
            model = sample.request.get("model")
            key = _key(model, names, bases)
            if key is None:
                self.skipped += 1
            elif key == _OUTSIDE:
                self.outside[str(model)] = self.outside.get(str(model), 0) + 1
            else:
                self.pending.setdefault(key, []).append(sample)

    def notes(self, record: ExperimentRecord) -> list[str]:
        lines = [
            f"resample=True: the {len(record.samples)} seeded chat completions recorded were each sent again"
            " to their replayed checkpoint and their choices compared (rows of kind 'samples'); rewards"
            " and environment turns come from rollout code the file does not hold, so the jobs train on"
            " the recorded groups"
        ]
        if record.unseeded_requests:
            lines.append(f"{record.unseeded_requests} chat completions had no seed and cannot be re-derived")
        if self.skipped:
            lines.append(f"{self.skipped} samples named a model without a step (':latest'): not re-derived")
        for name, count in self.outside.items():
            lines.append(
                f"{count} samples came from {name}, neither a model of the experiment nor a base model:"
                " not re-derivable, not sent again"
            )
        return lines

    def at(
        self, model_id: str | None, step: int | None, replayed_step: int | None
    ) -> tuple[str, str, str | None] | None:
        """(recorded digest, replayed digest, what differed) of the samples of ``(model_id, step)``,
        sent to the replay's checkpoint at ``replayed_step`` (or to the base model); None: none."""
        samples = self.pending.pop((model_id, step), [])
        if not samples:
            return None
        recorded, replayed, what = [], [], None
        for i, sample in enumerate(samples):
            request: dict[str, Any] = dict(sample.request)
            messages = request.pop("messages")
            name = request.pop("model", None)
            if model_id is not None:
                new = self.made[model_id]
                name = f"{ARTIFACT_PREFIX}{new.entity}/{new.project}/{new.name}:step{replayed_step}"
            again = sampled(self.client.chat.completions.create(messages=messages, model=name, **request))
            recorded.append(sample.choices)
            replayed.append(again)
            if what is None and again != sample.choices:
                why = _first_difference(sample.choices, again)
                what = f"sample {i + 1} of {len(samples)} sampled other tokens ({why})"
        return sha256_hex(canonical_json(recorded)), sha256_hex(canonical_json(replayed)), what

    @property
    def left(self) -> int:
        """Samples of steps the replay never reached."""
        return sum(len(v) for v in self.pending.values())


def _first_difference(was: list[dict[str, Any]], now: list[dict[str, Any]]) -> str:
    for a, b in zip(was, now, strict=False):
        for field in ("token_ids", "content", "finish_reason"):
            if a.get(field) != b.get(field):
                return f"{field}: recorded {a.get(field)!r}, replayed {b.get(field)!r}"
    return f"{len(was)} choices recorded, {len(now)} replayed"


_OUTSIDE: Key = ("", None)  # a model outside the experiment that is not a base: not re-derivable


def _bases(client: Client) -> set[str]:
    """The names the deployment serves base models under (``GET /v1/models`` entries without a
    parent); none where it cannot list them."""
    try:
        return {card.id for card in client.served_models().data if card.parent is None}
    except UnsupportedOperation:
        return set()


def _key(model: Any, names: dict[str, str], bases: set[str]) -> Key | None:
    """Which recorded checkpoint a request's ``model`` names: (model id, step); a base model
    (None, None); a recorded model without a step None; anything else :data:`_OUTSIDE`."""
    if not isinstance(model, str):
        return _OUTSIDE
    if model in bases:
        return None, None
    bare = model.removeprefix(ARTIFACT_PREFIX)
    match = _STEP.match(bare)
    head = match["head"] if match else bare.removesuffix(":latest")
    if head not in names:
        return _OUTSIDE
    return (names[head], int(match["step"])) if match else None
