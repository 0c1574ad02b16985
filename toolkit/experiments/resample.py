"""``replay(..., resample=True)``: the seeded chat completions recorded under the experiment, sent
again to the replayed checkpoints (same messages, parameters and seed) as soon as the replay reaches
the step they were sampled from, their choices compared with the recorded ones. Rewards and the
environment's turns come from rollout code the file does not hold: the jobs still train on the
recorded groups."""

from __future__ import annotations

import re
from typing import Any

from ..client import Client
from ..types.experiments import ExperimentRecord, Sample
from ..types.records import canonical_json, sha256_hex
from ..types.training import Model
from .experiment import sampled

ARTIFACT_PREFIX = "wandb-artifact:///"
_STEP = re.compile(r"^(?P<head>.+?):step(?P<step>\d+)$")
Key = tuple[str | None, int | None]  # (recorded model id, step); (None, None): a base model


class Resampler:
    """The recorded samples by the checkpoint they came from, sent again as the replay reaches it."""

    def __init__(self, record: ExperimentRecord, client: Client, made: dict[str, Model]) -> None:
        self.client = client
        self.made = made  # recorded model id -> the replay's model
        names: dict[str, str] = {}
        for entry in record.models:
            m = entry.model
            names |= {m.id: m.id, m.name: m.id, f"{m.entity}/{m.project}/{m.name}": m.id}
        self.pending: dict[Key, list[Sample]] = {}
        self.skipped = 0  # samples of a model named without a step (``:latest``): not re-derivable
        for sample in record.samples:
            key = _key(sample.request.get("model"), names)
            if key is None:
                self.skipped += 1
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


def _key(model: Any, names: dict[str, str]) -> Key | None:
    """Which recorded checkpoint a request's ``model`` names; a base model: (None, None)."""
    if not isinstance(model, str):
        return None, None
    bare = model.removeprefix(ARTIFACT_PREFIX)
    match = _STEP.match(bare)
    head = match["head"] if match else bare.removesuffix(":latest")
    if head not in names:
        return None, None  # a base model (or an adapter served by name): the same weights
    return (names[head], int(match["step"])) if match else None
