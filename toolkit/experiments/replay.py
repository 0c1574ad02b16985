"""``tk.replay(record)``: run an exported experiment's jobs again, in order, on new models (a fresh
local server in a temporary folder by default) and compare each checkpoint with its record."""

from __future__ import annotations

import contextlib
import html
import math
import os
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..client import Client, TrainingJobFailed, TrainingJobWarning, UnsupportedOperation
from ..client.local_server import local_server, stop
from ..types.experiments import ExperimentJob, ExperimentRecord
from ..types.records import WALL_CLOCK_PREFIXES, CheckpointRecord, replayable
from ..types.training import Model
from .experiment import load_experiment
from .resample import Resampler

BUILTIN_PREFIX = "toolkit/"  # the local server's built-in bases (served without --base-model)
NO_RECIPE = (
    "resample=True: the record holds no seeded chat completion and no rollout recipe (the rollout "
    "function, its scenarios and reward code live in the notebook, not in the file), so the rollouts "
    "cannot be sampled again here; the jobs were replayed on the recorded groups. To re-run the whole "
    "loop, run the notebook again under tk.experiment with the same seed and replay or compare its export."
)


@dataclass(frozen=True)
class Divergence:
    """Where a replay first parted from its record: the recorded checkpoint ``step`` of ``job_id``,
    and ``what`` differed (``checkpoint_digest``, ``metric <name>: ...``, a failed job, ...)."""

    step: int | None
    job_id: str
    what: str


@dataclass(frozen=True)
class ReplayRow:
    step: int | None
    job_id: str
    kind: str
    recorded_digest: str | None
    replayed_digest: str | None
    match: bool
    what: str | None = None  # what differed, when it did


@dataclass
class ReplayReport:
    """One row per replayed job (and, with ``resample``, per checkpoint sampled again);
    ``first_divergence`` is the first row that did not match; ``ok``: there were rows and all matched."""

    rows: list[ReplayRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def first_divergence(self) -> Divergence | None:
        row = next((r for r in self.rows if not r.match), None)
        return Divergence(row.step, row.job_id, row.what or "") if row else None

    @property
    def ok(self) -> bool:
        return bool(self.rows) and self.first_divergence is None

    def __repr__(self) -> str:
        first = self.first_divergence
        verdict = "every checkpoint matches" if self.ok else f"first divergence: {first}"
        return f"ReplayReport({len(self.rows)} jobs; {verdict})"

    def _repr_html_(self) -> str:
        def short(digest: str | None) -> str:
            return html.escape(digest[:16]) if digest else "—"

        cells = "".join(
            f"<tr><td>{r.step if r.step is not None else '—'}</td><td>{html.escape(r.job_id)}</td>"
            f"<td>{r.kind}</td><td><code>{short(r.recorded_digest)}</code></td>"
            f"<td><code>{short(r.replayed_digest)}</code></td>"
            f"<td>{'✓' if r.match else '✗ ' + html.escape(r.what or '')}</td></tr>"
            for r in self.rows
        )
        notes = "".join(f"<p>{html.escape(n)}</p>" for n in self.notes)
        names = ("step", "job", "kind", "recorded digest", "replayed digest", "match")
        head = "<tr>" + "".join(f"<th>{n}</th>" for n in names) + "</tr>"
        return f"<table>{head}{cells}</table>{notes}"


def replay(
    record: ExperimentRecord | str | Path, client: Client | None = None, *, resample: bool = False
) -> ReplayReport:
    """Re-run the recorded jobs in order on new models (same bases and training settings, in a new
    project) and compare each checkpoint's digest and metrics with the record. ``client``: the
    deployment to replay on (default: a fresh local server in a temporary folder, removed after,
    training with the recorded thread count). ``resample``: also send the seeded chat completions
    recorded under the experiment again to the replayed checkpoints and compare them
    (:mod:`.resample`; what cannot be re-derived is said in the report's notes)."""
    if not isinstance(record, ExperimentRecord):
        record = load_experiment(record)
    notes = [NO_RECIPE] if resample and not record.samples else []
    if client is not None:
        return _replay(record, client, notes, resample)
    with _fresh_server(record) as (fresh, threads):
        if threads is not None:
            notes.append(
                f"replayed on a fresh local server training with {threads} torch threads, as recorded"
            )
        return _replay(record, fresh, notes, resample)


def _recorded_threads(record: ExperimentRecord) -> int | None:
    threads = {r.torch_threads for m in record.models for r in m.records if r.torch_threads is not None}
    return threads.pop() if len(threads) == 1 else None


@contextlib.contextmanager
def _fresh_server(record: ExperimentRecord) -> Iterator[tuple[Client, int | None]]:
    bases = sorted(
        {m.model.base_model for m in record.models if not m.model.base_model.startswith(BUILTIN_PREFIX)}
    )
    threads = _recorded_threads(record)
    with tempfile.TemporaryDirectory(prefix="toolkit-replay-") as tmp:
        folder = Path(tmp)
        saved = os.environ.get("TOOLKIT_TORCH_THREADS")
        if threads is not None:  # the server process inherits it at start
            os.environ["TOOLKIT_TORCH_THREADS"] = str(threads)
        try:
            url, key = local_server(folder, base_models=bases)
        finally:
            if saved is None:
                os.environ.pop("TOOLKIT_TORCH_THREADS", None)
            else:
                os.environ["TOOLKIT_TORCH_THREADS"] = saved
        try:
            with Client(url, key, deployment="local") as client:
                yield client, threads
        finally:
            stop(folder)


def _replay(record: ExperimentRecord, client: Client, notes: list[str], resample: bool) -> ReplayReport:
    notes.append(f"metrics compared: all but the wall-clock ones ({', '.join(WALL_CLOCK_PREFIXES)})")
    report = ReplayReport(notes=notes)
    project = f"replay-{uuid.uuid4().hex[:8]}"
    made: dict[str, Model] = {}  # recorded model id -> its replay
    for entry in record.models:
        req = entry.request
        model = client.models.create(
            project=project,
            name=entry.model.name,
            base_model=entry.model.base_model,
            lora_config=req.get("lora_config"),
            full_finetuning=req.get("full_finetuning"),
        )
        made[entry.model.id] = model
    recorded = {r.job_id: r for m in record.models for r in m.records if r.job_id}
    _note_earlier_steps(record, recorded, notes)
    resampler = Resampler(record, client, made) if resample and record.samples else None
    steps = dict.fromkeys(made, 0)  # the replay's step of each model

    def samples(model_id: str | None, step: int | None, job_id: str) -> None:
        found = resampler.at(model_id, step, steps.get(model_id or "")) if resampler else None
        if found is not None:
            was, now, what = found
            report.rows.append(ReplayRow(step, job_id, "samples", was, now, what is None, what))

    if resampler is not None:
        notes.extend(resampler.notes(record))
        samples(None, None, "base model")
        for model_id in made:
            samples(model_id, 0, "base model")
    for job in record.jobs:
        if job.status != "succeeded":
            notes.append(f"job {job.job_id} ({job.status}) wrote no checkpoint: not replayed")
            continue
        if job.model_id not in made:
            notes.append(f"job {job.job_id}: its model {job.model_id} is not in the record; replay stopped")
            break
        try:
            row = _replay_job(client, project, job, made[job.model_id].id, recorded.get(job.job_id))
        except _Stopped as stopped:  # the jobs after it would start from another checkpoint
            report.rows.append(stopped.row)
            notes.append(f"replay stopped at job {job.job_id}: {stopped.row.what}")
            break
        report.rows.append(row)
        steps[job.model_id] += 1
        samples(job.model_id, row.step, job.job_id)
    if resampler is not None and resampler.left:
        notes.append(f"{resampler.left} samples of steps the replay did not reach were not sent again")
    return report


def _note_earlier_steps(
    record: ExperimentRecord, recorded: dict[str, CheckpointRecord], notes: list[str]
) -> None:
    """A model whose first linked job started past step 0 had checkpoints from before the experiment:
    the replay starts from the base, so its checkpoints cannot match."""
    seen: set[str] = set()
    for job in record.jobs:
        first = recorded.get(job.job_id)
        if job.model_id in seen or first is None:
            continue
        seen.add(job.model_id)
        if first.parent_step:
            notes.append(
                f"model {job.model_id}: its first job of the experiment started from step "
                f"{first.parent_step}, trained outside it; the replay starts from the base"
            )


class _Stopped(Exception):
    def __init__(self, row: ReplayRow) -> None:
        super().__init__(row.what)
        self.row = row


def _replay_job(
    client: Client, project: str, job: ExperimentJob, model_id: str, record: CheckpointRecord | None
) -> ReplayRow:
    def row(replayed: CheckpointRecord | None, what: str | None) -> ReplayRow:
        return ReplayRow(
            step=record.step if record else job.result_step,
            job_id=job.job_id,
            kind=job.kind,
            recorded_digest=record.checkpoint_digest if record else None,
            replayed_digest=replayed.checkpoint_digest if replayed else None,
            match=what is None,
            what=what,
        )

    if not job.data.embedded:
        raise _Stopped(row(None, "data: not embedded in the record (named by digest only), cannot re-run"))
    request = job.request
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TrainingJobWarning)  # recorded groups of older steps
            if job.kind == "rl":
                handle = client.training_jobs.create(
                    model_id=model_id,
                    trajectory_groups=job.data.groups or [],
                    experimental_config=request.get("experimental_config"),
                )
            else:
                files = {name: text.encode() for name, text in (job.data.files or {}).items()}
                artifact = client.artifacts.upload(project=project, files=files, model_id=model_id)
                handle = client.sft_training_jobs.create(
                    model_id=model_id,
                    training_data_url=artifact.url,
                    config=request.get("config"),
                    experimental_config=request.get("experimental_config"),
                )
            step = handle.wait(progress=False).step
    except TrainingJobFailed as exc:
        raise _Stopped(row(None, f"the job failed: {exc}")) from None
    try:
        replayed = client.models.checkpoints.record(model_id, step)
    except UnsupportedOperation:
        return row(None, f"{client.deployment.label} keeps no checkpoint records: nothing to compare")
    if record is None:
        return row(replayed, "no record of the original checkpoint to compare with")
    return row(replayed, difference(record, replayed))


def difference(recorded: CheckpointRecord, replayed: CheckpointRecord) -> str | None:
    """What differs between a recorded checkpoint and its replay (None: nothing): the data, the base
    weights, the weights, then the first metric that differs (wall-clock ones left out)."""
    for name in ("data_digest", "base_digest", "checkpoint_digest"):
        was, now = getattr(recorded, name), getattr(replayed, name)
        if was is not None and was != now:
            return f"{name}: recorded {was[:16]}…, replayed {(now or 'none')[:16]}…"
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
