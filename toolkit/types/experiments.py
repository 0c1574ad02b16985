"""The file ``Experiment.export`` writes and ``tk.load_experiment`` reads: one self-contained JSON
document with what ran (source, versions, seed, deployment), the models with their checkpoint
records, and every job's request with its data (RL groups, SFT files) embedded or named by digest."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from .common import WireModel
from .records import CheckpointRecord
from .training import JobKind, Model

FORMAT_VERSION = 1


class Source(WireModel):
    """The notebook or script the experiment ran in and its git state (None outside a repository)."""

    path: str | None = None
    kind: Literal["notebook", "script", "interactive"] = "interactive"
    git_commit: str | None = None
    git_dirty: bool | None = None


class DeploymentInfo(WireModel):
    """The deployment the experiment trained on: ``local``, ``wandb`` (hosted) or ``custom``."""

    name: str
    base_url: str
    inference_url: str
    trace_url: str


class JobData(WireModel):
    """A job's data: an RL job's trajectory groups or an SFT job's uploaded files (name -> text).
    ``embedded`` false: too big or not seen by the experiment; only ``digest`` and ``size`` remain."""

    digest: str | None = None  # the record's data_digest: of the groups' canonical JSON, or the data file
    size: int = 0  # bytes of the canonical JSON or of the files
    embedded: bool = False
    groups: list[dict[str, Any]] | None = None
    files: dict[str, str] | None = None


class ExperimentJob(WireModel):
    """One job, in the order the experiment created them; ``request`` is the body as sent with the
    data taken out (``trajectory_groups`` of an RL job: in ``data``)."""

    job_id: str
    model_id: str
    kind: JobKind
    request: dict[str, Any]
    data: JobData
    status: str | None = None
    result_step: int | None = None


class ExperimentModel(WireModel):
    """A model created under the experiment: the create request as sent, the model, and the record of
    every checkpoint it has (empty where the deployment keeps no records)."""

    request: dict[str, Any]
    model: Model
    records: list[CheckpointRecord] = Field(default_factory=list)


class Sample(WireModel):
    """A seeded chat completion made under the experiment: the request as sent and what each choice
    sampled (``content``, ``finish_reason``, ``token_ids`` when asked for)."""

    request: dict[str, Any]
    choices: list[dict[str, Any]]


class ExperimentRecord(WireModel):
    format_version: int = FORMAT_VERSION
    name: str
    seed: int
    created_at: datetime
    source: Source
    python: str
    packages: dict[str, str]
    deployment: DeploymentInfo | None = None
    models: list[ExperimentModel] = Field(default_factory=list)
    jobs: list[ExperimentJob] = Field(default_factory=list)
    trace_projects: list[str] = Field(default_factory=list)
    samples: list[Sample] = Field(default_factory=list)  # seeded chat completions, in order
    unseeded_requests: int = 0  # chat completions without a seed (not kept: they cannot be re-derived)
    notes: list[str] = Field(default_factory=list)  # what the file leaves out, and why
