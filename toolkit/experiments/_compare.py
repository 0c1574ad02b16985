"""How a replayed checkpoint's record is compared with the recorded one: whether the record can be
compared at all, what differs (data, base and checkpoint digests, then the metrics), and what of the
environment differs, which explains a divergence (CPU capability, device, dtype, thread count,
versions, the base's hub revision)."""

from __future__ import annotations

import math

from ..types.records import CheckpointRecord, replayable

TRAINED_METRIC = "data/step_num_gradient_steps"
PACKAGES = ("toolkit", "torch", "transformers", "peft")


def not_comparable(recorded: CheckpointRecord | None) -> str | None:
    """Why a replay cannot be compared with ``recorded`` (None: it can): no record, or one without a
    checkpoint digest although its job trained (a record from before digests, or an edited one)."""
    if recorded is None:
        return "no record of the original checkpoint to compare with"
    steps = recorded.metrics.get(TRAINED_METRIC, 0.0)
    if recorded.checkpoint_digest is None and steps > 0:
        return f"the record has no checkpoint_digest, though its job took {steps:g} gradient steps"
    return None


def difference(recorded: CheckpointRecord, replayed: CheckpointRecord) -> str | None:
    """What differs between a comparable recorded checkpoint and its replay (None: nothing): the data,
    the base weights, the weights, then the first metric that differs (wall-clock ones left out)."""
    for name in ("data_digest", "base_digest", "checkpoint_digest"):
        was, now = getattr(recorded, name), getattr(replayed, name)
        if was != now and (was is not None or name == "checkpoint_digest"):
            return f"{name}: recorded {(was or 'none')[:16]}…, replayed {(now or 'none')[:16]}…"
    was_metrics, now_metrics = replayable(recorded.metrics), replayable(replayed.metrics)
    for key in sorted(set(was_metrics) | set(now_metrics)):
        was_value, now_value = was_metrics.get(key), now_metrics.get(key)
        same = was_value == now_value or (
            was_value is not None
            and now_value is not None
            and math.isnan(was_value)
            and math.isnan(now_value)
        )
        if not same:
            return f"metric {key}: recorded {was_value}, replayed {now_value}"
    return None


def environment(recorded: CheckpointRecord, replayed: CheckpointRecord) -> list[str]:
    """What the replay ran on that the record did not, each as ``recorded on AVX512, replayed on
    AVX2`` (fields either side lacks are left out)."""
    pairs: list[tuple[str, object, object]] = [
        ("on {}", recorded.cpu_capability, replayed.cpu_capability),
        ("on {}", recorded.device, replayed.device),
        ("in {}", recorded.dtype, replayed.dtype),
        ("with {} torch threads", recorded.torch_threads, replayed.torch_threads),
        *(
            (f"with {package} {{}}", recorded.versions.get(package), replayed.versions.get(package))
            for package in PACKAGES
        ),
        ("on base revision {}", recorded.base_revision, replayed.base_revision),
    ]
    return [
        f"recorded {form.format(was)}, replayed {form.format(now)}"
        for form, was, now in pairs
        if was is not None and now is not None and was != now
    ]
