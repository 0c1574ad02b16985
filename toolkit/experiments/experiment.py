"""``tk.experiment(name, seed=...)``: records what ran and links the models, jobs, artifacts and trace
projects created under it; ``Experiment.export(path)`` writes it all into one JSON file that
``tk.load_experiment(path)`` reads back (:class:`~toolkit.types.experiments.ExperimentRecord`)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import ValidationError

from .. import tracking
from .._version import __version__
from ..client import AsyncClient, Client, NotFoundError, OneLine, UnsupportedOperation, _links
from ..client._transport import Config
from ..seeding import use_default_seed
from ..types.chat import ChatCompletion
from ..types.experiments import (
    FORMAT_VERSION,
    DeploymentInfo,
    ExperimentJob,
    ExperimentModel,
    ExperimentRecord,
    JobData,
    Sample,
)
from ..types.records import canonical_json, groups_digest, sha256_hex
from ..types.training import Artifact, Model, TrainingJobCreated
from ._source import packages, source

EMBED_LIMIT = 256 << 20  # bytes of one job's data embedded in an export; larger: by digest only
DATA_FILES = ("train.jsonl", "trajectories.jsonl")  # the file an SFT job's data_digest is of
ARTIFACT_PREFIX = "wandb-artifact:///"


def deployment_of(config: Config) -> DeploymentInfo:
    return DeploymentInfo(
        name=config.deployment.name,
        base_url=config.base_url,
        inference_url=config.inference_url,
        trace_url=config.trace_url,
    )


@dataclass
class _Job:
    kind: str
    body: dict[str, Any]
    job_id: str
    config: Config


@dataclass
class _Links:
    models: dict[str, tuple[dict[str, Any], Model, Config]] = field(default_factory=dict)
    jobs: list[_Job] = field(default_factory=list)
    artifacts: dict[str, dict[str, bytes]] = field(default_factory=dict)  # url -> files
    trace_projects: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    unseeded: int = 0


class Experiment:
    """An open experiment (a context manager). Under it, every seeded call without a ``seed`` takes
    one derived from ``seed`` (``toolkit.seeding``), and the models, training jobs, uploaded SFT files
    and trace projects created through any toolkit client are linked to it. With ``track`` (``"wandb"``,
    ``"mlflow"``), closing it without an error logs it to a new run of each (:func:`toolkit.tracking.track`,
    ``track_options`` its keywords: ``tracking_uri`` for MLflow, the rest for ``wandb.init``); the runs'
    ids are then in ``tracked_runs``."""

    def __init__(
        self,
        name: str,
        *,
        seed: int,
        client: Client | AsyncClient | None = None,
        track: Sequence[str] = (),
        track_options: Mapping[str, Any] | None = None,
    ) -> None:
        _check_arguments(name, seed, client, track, track_options)
        self.name = name
        self.track, self.track_options = list(track), dict(track_options or {})
        self.tracked_runs: dict[str, str] = {}
        self.seed = seed
        self.client = client
        self.created_at = datetime.now(UTC)
        self.source = source()
        self.python = platform.python_version()
        self.packages = packages()
        self._links = _Links()
        self._deployment = deployment_of(client.config) if client is not None else None
        self._stack: contextlib.ExitStack | None = None

    # ------------------------------------------------------------------ context

    def __enter__(self) -> Experiment:
        stack = contextlib.ExitStack()
        stack.enter_context(use_default_seed(self.seed))
        token = _links.active.set(self)
        stack.callback(_links.active.reset, token)
        self._stack = stack
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._stack is not None:
            self._stack.close()
            self._stack = None
            if self.track and kind is None:
                try:
                    self.tracked_runs = tracking.track(self.track, self, **self.track_options)
                except tracking.TrackingError as failed:
                    self.tracked_runs = failed.runs
                    raise

    def start(self) -> Experiment:
        """Open it without a ``with`` block (a notebook's later cells stay in it until :meth:`stop`)."""
        return self.__enter__()

    def stop(self) -> None:
        self.__exit__(None, None, None)

    # ------------------------------------------------------------------ links (toolkit.client._links)

    def linked(self, link: _links.Link, request: Any, result: Any, config: Config) -> None:
        if self._deployment is None:
            self._deployment = deployment_of(config)
        if link == "model" and isinstance(result, Model):
            self._links.models.setdefault(result.id, (dict(request), result, config))
        elif link in ("rl_job", "sft_job") and isinstance(result, TrainingJobCreated):
            self._links.jobs.append(_Job(link.removesuffix("_job"), dict(request), result.id, config))
        elif link == "artifact" and isinstance(result, Artifact):
            self._links.artifacts[result.url] = dict(request)
        elif link == "chat" and isinstance(result, ChatCompletion):
            if isinstance(request.get("seed"), int):
                self._links.samples.append(Sample(request=dict(request), choices=sampled(result)))
            else:
                self._links.unseeded += 1

    def trace_project(self, project: str) -> None:
        if project not in self._links.trace_projects:
            self._links.trace_projects.append(project)

    @property
    def model_ids(self) -> list[str]:
        return list(self._links.models)

    @property
    def job_ids(self) -> list[str]:
        return [job.job_id for job in self._links.jobs]

    @property
    def trace_projects(self) -> list[str]:
        return list(self._links.trace_projects)

    # ------------------------------------------------------------------ export

    def record(self, *, embed_limit: int = EMBED_LIMIT) -> ExperimentRecord:
        """What :meth:`export` writes. Every linked job must have ended."""
        notes: list[str] = []
        with _Clients() as clients:
            jobs = [self._job(j, clients.of(j.config), embed_limit, notes) for j in self._links.jobs]
            linked = dict(self._links.models)
            for job in self._links.jobs:
                if job.body["model_id"] not in linked:
                    linked |= _earlier_model(
                        str(job.body["model_id"]), clients.of(job.config), job.config, notes
                    )
            models = [self._model(req, m, clients.of(c), notes) for req, m, c in linked.values()]
        return ExperimentRecord(
            format_version=FORMAT_VERSION,
            name=self.name,
            seed=self.seed,
            created_at=self.created_at,
            source=self.source,
            python=self.python,
            packages=self.packages,
            deployment=self._deployment,
            models=models,
            jobs=jobs,
            trace_projects=self.trace_projects,
            samples=self._samples(embed_limit, notes),
            unseeded_requests=self._links.unseeded,
            notes=notes,
        )

    def _samples(self, limit: int, notes: list[str]) -> list[Sample]:
        samples = self._links.samples
        size = len(canonical_json([s.model_dump(mode="json") for s in samples]))
        if size <= limit:
            return list(samples)
        notes.append(f"the {len(samples)} seeded chat completions are not embedded (too big: {size} bytes)")
        return []

    def export(self, path: str | Path, *, embed_limit: int = EMBED_LIMIT) -> Path:
        """Write the experiment into one self-contained JSON file: what ran, each model's checkpoint
        records, each job's request with its data (RL groups, SFT files) embedded, or named by digest
        when larger than ``embed_limit`` bytes (said in ``notes``). The file is written whole or not
        at all (a temporary file beside it, renamed over it)."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        text = self.record(embed_limit=embed_limit).model_dump_json(indent=1)
        with tempfile.NamedTemporaryFile(
            "w", dir=out.parent, prefix=f".{out.name}.", suffix=".tmp", delete=False, encoding="utf-8"
        ) as tmp:
            try:
                tmp.write(text)
                tmp.flush()
                os.fsync(tmp.fileno())
            except BaseException:
                tmp.close()
                os.unlink(tmp.name)
                raise
        os.replace(tmp.name, out)
        return out

    def _job(self, job: _Job, client: Client, limit: int, notes: list[str]) -> ExperimentJob:
        state = client.training_jobs.retrieve(job.job_id)
        if state.status in ("queued", "running"):
            raise RuntimeError(f"job {job.job_id} is still {state.status}: wait for it before exporting")
        request = {k: v for k, v in job.body.items() if k != "trajectory_groups"}
        model_id = str(job.body.get("model_id"))
        if job.kind == "rl":
            groups = job.body.get("trajectory_groups") or []
            size = len(canonical_json(groups))
            data = JobData(digest=groups_digest(groups), size=size, embedded=size <= limit)
            data.groups = groups if data.embedded else None
        else:
            digest = _trained_on(client, model_id, state.result_step)
            data = self._sft_data(job.job_id, str(job.body.get("training_data_url")), digest, limit, notes)
        if not data.embedded and data.size > limit:
            notes.append(f"job {job.job_id}: its data is not embedded (too big); the file names it by digest")
        return ExperimentJob(
            job_id=job.job_id,
            model_id=model_id,
            kind=job.kind,
            request=request,
            data=data,
            status=state.status,
            result_step=state.result_step,
        )

    def _sft_data(self, job_id: str, url: str, digest: str | None, limit: int, notes: list[str]) -> JobData:
        """The files the job trained on: among the uploads of the experiment under ``url`` (any
        version of its name where it names none, or ``:latest``), the one whose data file has the
        record's ``digest``; where no record says, the upload of that exact URL. None found: only the
        digest, and a note saying why."""
        stem, _, version = url.removeprefix(ARTIFACT_PREFIX).partition(":")
        fixed = version.startswith("v")
        uploads = [
            files
            for u, files in self._links.artifacts.items()
            if u == url or (not fixed and u.removeprefix(ARTIFACT_PREFIX).partition(":")[0] == stem)
        ]
        if digest is not None:
            files = next((f for f in uploads if sha256_hex(_data_file(f)) == digest), None)
            why = f"no upload of the experiment has the data it trained on (digest {digest[:16]}…)"
        else:
            files = self._links.artifacts.get(url)
            why = "its data was uploaded outside the experiment, or no record says which upload it was"
        if files is None:
            notes.append(f"job {job_id}: {why}; the file names it by digest only")
            return JobData(digest=digest)
        size = sum(len(content) for content in files.values())
        data = JobData(digest=sha256_hex(_data_file(files)), size=size, embedded=size <= limit)
        if data.embedded:
            try:
                data.files = {name: content.decode() for name, content in files.items()}
            except UnicodeDecodeError:
                data.embedded = False
                notes.append(f"job {job_id}: its files are not UTF-8 text; the file names them by digest")
        return data

    @staticmethod
    def _model(request: dict[str, Any], model: Model, client: Client, notes: list[str]) -> ExperimentModel:
        try:
            records = client.models.records(model.id)
        except UnsupportedOperation:
            notes.append(f"model {model.id}: {client.deployment.label} keeps no checkpoint records")
            records = []
        return ExperimentModel(request=request, model=model, records=records)

    def __repr__(self) -> str:
        return (
            f"Experiment({self.name!r}, seed={self.seed}, models={len(self._links.models)},"
            f" jobs={len(self._links.jobs)})"
        )


def _data_file(files: dict[str, bytes]) -> bytes:
    """The file of an SFT upload its job's ``data_digest`` is of."""
    return next((files[name] for name in DATA_FILES if name in files), b"")


def _trained_on(client: Client, model_id: str, step: int | None) -> str | None:
    """The ``data_digest`` of the record of the checkpoint a job wrote (None: no such record)."""
    if step is None:
        return None
    try:
        return client.models.checkpoints.record(model_id, step).data_digest
    except (UnsupportedOperation, NotFoundError):
        return None


def _check_arguments(
    name: object, seed: object, client: object, track: Sequence[str], track_options: object
) -> None:
    """Refuse what :class:`Experiment` could not record or track, when it is given (not at export)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"an experiment's name is a non-empty string, not {name!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"an experiment's seed is an integer, not {seed!r}")
    if client is not None and not isinstance(client, Client | AsyncClient):
        raise TypeError(f"client= takes a tk.Client or tk.AsyncClient, not a {type(client).__name__}")
    tracking.check_trackers(track)
    if track_options is not None and not isinstance(track_options, Mapping):
        raise TypeError(f"track_options= takes a dict of keywords, not {track_options!r}")


def _earlier_model(
    model_id: str, client: Client, config: Config, notes: list[str]
) -> dict[str, tuple[dict[str, Any], Model, Config]]:
    """A model a linked job trained that was created before the experiment opened: read it back,
    with the create request its fields say (none where the deployment cannot be asked)."""
    try:
        model = client.models.retrieve(model_id)
    except UnsupportedOperation:
        notes.append(f"model {model_id} was created before the experiment and cannot be read back here")
        return {}
    notes.append(f"model {model_id} was created before the experiment: its create request is read from it")
    request = model.model_dump(mode="json", include={"entity", "project", "name", "base_model"})
    if model.full_finetuning:
        request["full_finetuning"] = True
    elif model.lora_config is not None:
        request["lora_config"] = model.lora_config.model_dump(mode="json")
    return {model_id: (request, model, config)}


def sampled(completion: ChatCompletion) -> list[dict[str, Any]]:
    """What each choice of a completion sampled (the part a seeded request gives again)."""
    return [
        {"content": c.message.content, "finish_reason": c.finish_reason, "token_ids": c.token_ids}
        for c in completion.choices
    ]


class _Clients(contextlib.AbstractContextManager["_Clients"]):
    """Sync clients of the deployments the linked operations went to (one per deployment)."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str | None], Client] = {}

    def of(self, config: Config) -> Client:
        key = (config.base_url, config.api_key)
        if key not in self._open:
            self._open[key] = Client(
                config.base_url,
                config.api_key,
                inference_url=config.inference_url,
                trace_url=config.trace_url,
                deployment=config.deployment.name,
            )
        return self._open[key]

    def __exit__(self, *exc: object) -> None:
        for client in self._open.values():
            client.close()


def experiment(
    name: str,
    *,
    seed: int,
    client: Client | AsyncClient | None = None,
    track: Sequence[str] = (),
    track_options: Mapping[str, Any] | None = None,
) -> Experiment:
    """Open an experiment: ``with tk.experiment("reverse-grpo", seed=1) as exp: ...`` then
    ``exp.export("run.json")``. ``client`` names the deployment (else the first one used under it);
    ``track=["wandb", "mlflow"]`` logs it to those trackers when it closes (see :class:`Experiment`)."""
    return Experiment(name, seed=seed, client=client, track=track, track_options=track_options)


class ExperimentFileError(OneLine, ValueError):
    """A file :func:`load_experiment` does not read as an export; the message names the file, what is
    wrong with it and what to do."""


def load_experiment(path: str | Path) -> ExperimentRecord:
    """Read a file :meth:`Experiment.export` wrote. A file cut short, not an export, from a newer
    toolkit, or whose embedded data no longer matches its digests (edited by hand) is an
    :class:`ExperimentFileError` naming it: a replay of it would report a false divergence."""
    path = Path(path)
    text = path.read_text()
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as error:
        raise ExperimentFileError(
            f"{path} is not whole JSON ({error.msg} at line {error.lineno} of {len(text.splitlines())}):"
            " it was cut short or edited; export the experiment again"
        ) from None
    version = raw.get("format_version") if isinstance(raw, dict) else None
    if isinstance(raw, dict) and {"cells", "nbformat"} <= set(raw):
        raise ExperimentFileError(
            f"{path} is a notebook, not an exported experiment: load the file exp.export(path) wrote"
        )
    if isinstance(version, bool) or not isinstance(version, int):
        raise ExperimentFileError(
            f"{path} is not an exported experiment (no format_version): load the file exp.export(path) wrote"
        )
    if version > FORMAT_VERSION:
        raise ExperimentFileError(
            f"{path} was written by a newer toolkit (format_version {version}; toolkit {__version__} reads"
            f" up to {FORMAT_VERSION}): upgrade it (pip install -U rl-notebook-toolkit)"
        )
    try:
        record = ExperimentRecord.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ExperimentFileError(
            f"{path}: {where}: {first['msg']} ({error.error_count()} problem(s) in all): not a file"
            " exp.export wrote, or edited since; export the experiment again"
        ) from None
    edited = _edited(record)
    if edited is not None:
        raise ExperimentFileError(
            f"{path}: {edited} no longer matches its digest (edited after the export?): a replay would"
            " train on other data than the run did; export the experiment again"
        )
    return record


def _edited(record: ExperimentRecord) -> str | None:
    """The first embedded data of ``record`` that differs from what its digest names (the field, e.g.
    ``jobs[1].data.groups``), or None."""
    for n, job in enumerate(record.jobs):
        data = job.data
        if not data.embedded or data.digest is None:
            continue
        if data.groups is not None and groups_digest(data.groups) != data.digest:
            return f"jobs[{n}].data.groups"
        name = next((name for name in DATA_FILES if name in (data.files or {})), None)
        if name is not None and sha256_hex((data.files or {})[name].encode()) != data.digest:
            return f"jobs[{n}].data.files[{name!r}]"
    return None
