"""``tk.replay(record)``: run an exported experiment's jobs again, in order, on new models (a fresh
local server in a temporary folder by default) and compare each checkpoint with its record."""

from __future__ import annotations

import contextlib
import html
import os
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..client import Client, TrainingJobFailed, TrainingJobWarning, UnsupportedOperation
from ..client.local_server import local_server, stop
from ..types.experiments import ExperimentJob, ExperimentRecord
from ..types.records import WALL_CLOCK_PREFIXES, CheckpointRecord
from ..types.training import Model
from ._compare import difference, environment, not_comparable
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
    """One replayed job (or checkpoint sampled again). ``comparable`` false: the record holds nothing
    to compare the replay with (``what`` says why); such a row is never a match."""

    step: int | None
    job_id: str
    kind: str
    recorded_digest: str | None
    replayed_digest: str | None
    match: bool
    what: str | None = None  # what differed, or why it cannot be compared
    comparable: bool = True


@dataclass
class ReplayReport:
    """One row per replayed job (and, with ``resample``, per checkpoint sampled again);
    ``first_divergence`` is the first comparable row that did not match; ``ok``: there were rows and
    all matched (a row that cannot be compared is not a match)."""

    rows: list[ReplayRow] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def first_divergence(self) -> Divergence | None:
        row = next((r for r in self.rows if r.comparable and not r.match), None)
        return Divergence(row.step, row.job_id, row.what or "") if row else None

    @property
    def ok(self) -> bool:
        return bool(self.rows) and all(r.match for r in self.rows)

    def __repr__(self) -> str:
        first, unknown = self.first_divergence, sum(not r.comparable for r in self.rows)
        verdicts = [f"first divergence: {first}"] if first else []
        verdicts += [f"{unknown} not comparable"] if unknown else []
        verdict = "; ".join(verdicts) or ("every checkpoint matches" if self.ok else "nothing replayed")
        return f"ReplayReport({len(self.rows)} jobs; {verdict})"

    def _repr_html_(self) -> str:
        def short(digest: str | None) -> str:
            return html.escape(digest[:16]) if digest else "—"

        def verdict(r: ReplayRow) -> str:
            mark = "✓" if r.match else "✗ " if r.comparable else "not comparable: "
            return mark + html.escape(r.what or "")

        cells = "".join(
            f"<tr><td>{r.step if r.step is not None else '—'}</td><td>{html.escape(r.job_id)}</td>"
            f"<td>{r.kind}</td><td><code>{short(r.recorded_digest)}</code></td>"
            f"<td><code>{short(r.replayed_digest)}</code></td><td>{verdict(r)}</td></tr>"
            for r in self.rows
        )
        notes = "".join(f"<p>{html.escape(n)}</p>" for n in self.notes)
        names = ("step", "job", "kind", "recorded digest", "replayed digest", "match")
        head = "<tr>" + "".join(f"<th>{n}</th>" for n in names) + "</tr>"
        return f"<table>{head}{cells}</table>{notes}"


def replay(
    record: ExperimentRecord | str | Path,
    client: Client | None = None,
    *,
    resample: bool = False,
    device: str | None = None,
) -> ReplayReport:
    """Re-run the recorded jobs in order on new models (same bases and training settings, in a new
    project) and compare each checkpoint's digest and metrics with the record. ``client``: the
    deployment to replay on (default: a fresh local server in a temporary folder, removed after,
    training on the recorded device with the recorded thread count; ``device`` names another, e.g.
    ``"cpu"`` for a record made on a GPU). ``resample``: also send the seeded chat completions
    recorded under the experiment again to the replayed checkpoints and compare them
    (:mod:`.resample`; what cannot be re-derived is said in the report's notes). A divergence is
    explained by what differs between the two sides' records (CPU capability, device, dtype, threads,
    versions, the base's hub revision) and by jobs made outside the experiment."""
    if not isinstance(record, ExperimentRecord):
        record = load_experiment(record)
    notes = [NO_RECIPE] if resample and not record.samples else []
    if client is not None:
        return _replay(record, client, notes, resample)
    with _fresh_server(record, device) as (fresh, setting):
        notes.append(setting)
        return _replay(record, fresh, notes, resample)


def _recorded(record: ExperimentRecord, name: str) -> set[Any]:
    """The values of one field in the records of the experiment's jobs."""
    found = (getattr(r, name) for m in record.models for r in m.records if r.job_id)
    return {value for value in found if value is not None}


@contextlib.contextmanager
def _fresh_server(record: ExperimentRecord, device: str | None) -> Iterator[tuple[Client, str]]:
    """A local server in a temporary folder, on ``device`` (default: the recorded kind of device)
    with the recorded thread count; yields its client and a note saying how it was set."""
    bases = sorted(
        {m.model.base_model for m in record.models if not m.model.base_model.startswith(BUILTIN_PREFIX)}
    )
    threads, devices = _recorded(record, "torch_threads"), _recorded(record, "device")
    kinds = sorted({d.partition(":")[0] for d in devices})
    if device is not None:
        on = f"{device} (asked for; recorded on {', '.join(sorted(devices)) or 'none named'})"
    elif len(kinds) == 1:
        device, on = kinds[0], f"{kinds[0]}, as recorded"
    else:
        on = "its default device (the records name " + (", ".join(kinds) or "none") + ")"
    count = threads.pop() if len(threads) == 1 else None
    trains = f"{count} torch threads, as recorded" if count else "this machine's torch threads"
    with tempfile.TemporaryDirectory(prefix="toolkit-replay-") as tmp:
        folder = Path(tmp)
        saved = os.environ.get("TOOLKIT_TORCH_THREADS")
        if count is not None:  # the server process inherits it at start
            os.environ["TOOLKIT_TORCH_THREADS"] = str(count)
        try:
            url, key = local_server(folder, base_models=bases, device=device)
        finally:
            if saved is None:
                os.environ.pop("TOOLKIT_TORCH_THREADS", None)
            else:
                os.environ["TOOLKIT_TORCH_THREADS"] = saved
        try:
            with Client(url, key, deployment="local") as client:
                yield client, f"replayed on a fresh local server on {on}, training with {trains}"
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
    steps_of = {m.model.id: {r.step: r for r in m.records} for m in record.models}
    resampler = Resampler(record, client, made) if resample and record.samples else None
    steps = dict.fromkeys(made, 0)  # the replay's step of each model
    reached: dict[str, tuple[int, str | None]] = {}  # model id -> (recorded step, its job) replayed last
    after: dict[str, str] = {}  # model id -> the job outside the experiment its later rows follow

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
        original = recorded.get(job.job_id)
        gap = _outside(job, original, reached.get(job.model_id, (0, None)), steps_of.get(job.model_id, {}))
        if gap is not None:
            notes.append(gap[0])
            after[job.model_id] = gap[1]
        try:
            row, replayed = _replay_job(client, project, job, made[job.model_id].id, original)
        except _Stopped as stopped:  # the jobs after it would start from another checkpoint
            report.rows.append(stopped.row)
            notes.append(f"replay stopped at job {job.job_id}: {stopped.row.what}")
            break
        if original is not None and replayed is not None:
            notes.extend(f"the replay's environment differs: {e}" for e in environment(original, replayed))
        if not row.match and row.comparable and job.model_id in after:
            row = replace(row, what=f"{row.what}; {after[job.model_id]}")
        report.rows.append(row)
        reached[job.model_id] = (original.step if original else job.result_step or 0, job.job_id)
        steps[job.model_id] += 1
        samples(job.model_id, row.step, job.job_id)
    report.notes = list(dict.fromkeys(report.notes))  # each environment difference once
    if resampler is not None and resampler.left:
        report.notes.append(f"{resampler.left} samples of steps the replay did not reach were not sent again")
    return report


def _outside(
    job: ExperimentJob,
    record: CheckpointRecord | None,
    reached: tuple[int, str | None],
    steps: dict[int, CheckpointRecord],
) -> tuple[str, str] | None:
    """A job that trained from a checkpoint the experiment's previous job of its model did not make
    (``reached``: that job's recorded step, or 0 and None): the note naming the job outside the
    experiment that made it, and what the rows from this job on say of it."""
    step, previous = reached
    if record is None or record.parent_step is None or record.parent_step == step:
        return None
    maker = steps.get(record.parent_step)
    by = f"job {maker.job_id}" if maker is not None and maker.job_id else "a job"
    where = f"after job {previous}" if previous else "before its first job of the experiment"
    note = (
        f"model {job.model_id}: job {job.job_id} trained from step {record.parent_step}, made by {by}"
        f" outside the experiment ({where}); the replay trains it from step {step} instead"
    )
    return note, f"after step {record.parent_step}, made by {by} outside the experiment"


class _Stopped(Exception):
    def __init__(self, row: ReplayRow) -> None:
        super().__init__(row.what)
        self.row = row


def _replay_job(
    client: Client, project: str, job: ExperimentJob, model_id: str, record: CheckpointRecord | None
) -> tuple[ReplayRow, CheckpointRecord | None]:
    """The job run again on ``model_id``: its row and the replayed checkpoint's record."""

    def row(replayed: CheckpointRecord | None, what: str | None, comparable: bool = True) -> ReplayRow:
        return ReplayRow(
            step=record.step if record else job.result_step,
            job_id=job.job_id,
            kind=job.kind,
            recorded_digest=record.checkpoint_digest if record else None,
            replayed_digest=replayed.checkpoint_digest if replayed else None,
            match=what is None,
            what=what,
            comparable=comparable,
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
        lacking = f"{client.deployment.label} keeps no checkpoint records: nothing to compare"
        return row(None, lacking, comparable=False), None
    why = not_comparable(record)
    if record is None or why is not None:
        return row(replayed, why, comparable=False), replayed
    what, differs = difference(record, replayed), environment(record, replayed)
    return row(replayed, f"{what} ({'; '.join(differs)})" if what and differs else what), replayed
