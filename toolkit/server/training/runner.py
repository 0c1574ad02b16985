"""The job runner: accepts RL and SFT jobs, runs them one at a time off the request path, records
their events, and writes each new checkpoint before the job's ``training_ended`` event.

Life cycle (docs/training.md): ``queued -> running -> succeeded | failed | cancelled``. The new
checkpoint (a peft adapter folder, or whole weights) and its optimizer state are staged under
temporary names and renamed into place (:mod:`.checkpoint_files`); the checkpoint row, the job's new
status and ``training_ended`` are then written in one transaction. After a crash, jobs left
``running`` fail on restart with their ``training_failed`` event, files without a checkpoint row
are removed and queued jobs run again.
"""

from __future__ import annotations

import filecmp
import json
import logging
import math
import re
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...types.job_warnings import NOTHING_TRAINED, STALE_GROUPS, group_versions, stale_groups
from ...types.training import (
    CHECKPOINT_METRIC_NAMES,
    CreateRLTrainingJob,
    CreateSFTTrainingJob,
    ExperimentalSFTConfig,
    ExperimentalTrainingConfig,
    TrainingJob,
    TrajectoryGroup,
)
from ..engine.device import Placement
from ..engine.model import BaseModelSpec
from ..engine.resources import trim_heap
from ..errors import Unprocessable
from ..store.artifacts import Artifacts
from ..store.db import Database
from ..store.jobs import Jobs
from ..store.logs import TrajectoryLogs
from ..store.models import CheckpointRow, Models
from ..store.records import CheckpointRecords
from ..store.users import User
from .checkpoint_files import CheckpointFolders, hold_after_publish, optimizer_file
from .config import LOGPROB_CHUNK_SIZE, SFT_AUTO_BATCH_SIZE, SFT_LEARNING_RATE, resolve
from .data import DATA_FILES, TrainingDataError, iter_conversations
from .job_metrics import numbers, over_steps, train_metrics
from .job_warnings import nothing_trained, rl_learning_rate, unknown_keys
from .job_worker import JobWorker
from .policy import Policy, Trainer, reference_model
from .records import record_fields
from .rollout_metrics import rollout_metrics
from .sequences import Sample, UntrainableError
from .trainer import (
    peak_learning_rate,
    plan_rl,
    reward_std_lr_multiplier,
    run_rl,
    run_sft,
    sft_batches,
)

if TYPE_CHECKING:
    from transformers import PreTrainedModel

log = logging.getLogger("toolkit.training")

CANCELLED = "Training job was cancelled"
INTERRUPTED = "The server stopped while this job was running; no checkpoint was written. Start it again."
_ADAPTER_STEP = re.compile(r"step(\d+)/?$")


class Stop(Exception):
    """Raised between gradient steps to end a job early (cancel or shutdown)."""

    def __init__(self, message: str, status: str) -> None:
        super().__init__(message)
        self.status = status


def reference_step(cfg: ExperimentalTrainingConfig | None, base_step: int) -> int | None:
    """The checkpoint step the KL penalty compares against: none without a penalty, else the
    given step, the step ``lag`` before the one being trained, the step an adapter path ends in,
    or the base weights (step 0)."""
    if cfg is None or not cfg.kl_penalty_coef:
        return None
    if cfg.kl_penalty_reference_step is not None:
        return cfg.kl_penalty_reference_step
    if cfg.kl_penalty_step_lag is not None:
        return max(0, base_step + 1 - cfg.kl_penalty_step_lag)
    if cfg.kl_ref_adapter_path:
        match = _ADAPTER_STEP.search(cfg.kl_ref_adapter_path)
        if match is None:
            raise UntrainableError(
                "kl_ref_adapter_path must name a checkpoint of this model, ending in step<N>"
            )
        return int(match[1])
    return 0


@dataclass
class TrainedOn:
    """The groups an RL job trained on and the advantage it used for each trajectory."""

    groups: list[TrajectoryGroup]
    advantages: list[list[float]]


def _meaning(request: dict[str, Any], *, leave_out: tuple[str, ...] = ()) -> str:
    """What a stored request asks for, comparable: its JSON without null values (a null means the
    default, as an absent key does) nor the keys in ``leave_out``, keys sorted."""

    def settled(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: settled(v) for k, v in value.items() if v is not None}
        return [settled(v) for v in value] if isinstance(value, list) else value

    return json.dumps(settled({k: v for k, v in request.items() if k not in leave_out}), sort_keys=True)


def _rl_twin(request: str) -> Callable[[str], bool]:
    """Whether a stored RL request asks for what ``request`` does (the same groups and config)."""
    meaning = _meaning(json.loads(request))
    return lambda stored: _meaning(json.loads(stored)) == meaning


def _sft_twin(request: dict[str, Any]) -> Callable[[str], bool]:
    """Whether a stored SFT request trains what ``request`` would: the same settings on a data file of
    the same bytes (the same data uploaded again has another URL and folder)."""
    meaning = _meaning(request, leave_out=("path", "request"))

    def twin(stored: str) -> bool:
        other = json.loads(stored)
        if _meaning(other, leave_out=("path", "request")) != meaning:
            return False
        path = Path(other["path"])
        return path.is_file() and filecmp.cmp(path, request["path"], shallow=False)

    return twin


class TrainingRunner:
    """Training jobs of every user, run in submission order on the server's job worker."""

    def __init__(
        self,
        db: Database,
        models: Models,
        jobs: Jobs,
        logs: TrajectoryLogs,
        worker: JobWorker,
        base_models: dict[str, BaseModelSpec],
        checkpoints_dir: Path,
        placement: Placement | None = None,
        on_checkpoint: Callable[[str, int, Path], None] | None = None,
    ) -> None:
        """``on_checkpoint(model_id, step, folder)`` runs after a job wrote a checkpoint with files."""
        self.db = db
        self.models = models
        self.jobs = jobs
        self.logs = logs
        self.worker = worker
        self.base_models = base_models
        self.files = CheckpointFolders(checkpoints_dir)
        self.trainer = Trainer(placement)
        self.on_checkpoint = on_checkpoint
        self.records = CheckpointRecords(db, models)
        self._cancel: set[str] = set()
        self._stopping = threading.Event()
        self._recover()

    # ------------------------------------------------------------------ requests

    def submit_rl(self, user: User, req: CreateRLTrainingJob, *, allow_duplicate: bool = False) -> str:
        self.models.get(user, req.model_id)
        loc = ["body", "experimental_config"]
        try:
            step = reference_step(req.experimental_config, self.models.current_step(req.model_id))
        except UntrainableError as exc:
            raise Unprocessable(loc, str(exc)) from None
        if step is not None and self.models.checkpoint_at(req.model_id, step) is None:
            raise Unprocessable(loc, f"the KL reference checkpoint step {step} does not exist")
        # json.dumps, not model_dump_json: NaN and infinite metrics must read back as numbers
        request = json.dumps(req.model_dump(mode="json", exclude_unset=True))
        twin = None if allow_duplicate else _rl_twin(request)
        return self._enqueue(self.jobs.create(user, req.model_id, "rl", request, twin=twin), req)

    def submit_sft(
        self, user: User, req: CreateSFTTrainingJob, artifacts: Artifacts, *, allow_duplicate: bool = False
    ) -> str:
        self.models.get(user, req.model_id)
        artifact, folder = artifacts.resolve(user, req.training_data_url)
        data_file = next(name for name in DATA_FILES if (folder / name).exists())
        config = req.config
        batch_size = config.batch_size if config and isinstance(config.batch_size, int) else None
        batch_size = batch_size or SFT_AUTO_BATCH_SIZE
        num_batches = math.ceil(artifact.num_records / batch_size)
        lr = config.learning_rate if config and config.learning_rate is not None else SFT_LEARNING_RATE
        if isinstance(lr, list) and len(lr) != num_batches:
            raise Unprocessable(
                ["body", "config", "learning_rate"],
                f"{len(lr)} learning rates for {num_batches} batches"
                f" ({artifact.num_records} examples, batch size {batch_size}); give one per batch",
            )
        request = {
            "path": str(folder / data_file),
            "batch_size": batch_size,
            "learning_rates": lr if isinstance(lr, list) else [lr] * num_batches,
            "assistant_turns": (config.assistant_turns if config else None) or "all",
            "experimental_config": experimental.model_dump(mode="json", exclude_unset=True)
            if (experimental := req.experimental_config)
            else None,
            "request": req.model_dump(mode="json", exclude_unset=True),  # as sent, for its record
        }
        twin = None if allow_duplicate else _sft_twin(request)
        return self._enqueue(self.jobs.create(user, req.model_id, "sft", json.dumps(request), twin=twin))

    def cancel(self, user: User, job_id: str) -> TrainingJob:
        """Queued: cancelled at once. Running: stops before its next gradient step. Ended: unchanged."""
        job = self.jobs.get(user, job_id)
        if job.status == "queued" and self.jobs.fail(job_id, CANCELLED, "cancelled"):
            return self.jobs.get(user, job_id)
        if job.status in ("queued", "running"):
            self._cancel.add(job_id)
        return self.jobs.get(user, job_id)

    def stop(self) -> None:
        """Shutdown: the running job stops before its next gradient step and fails."""
        self._stopping.set()

    def _enqueue(self, job_id: str, request: CreateRLTrainingJob | None = None) -> str:
        """Queue the job; an RL job's validated ``request`` goes with it (the stored copy is read
        back only for jobs queued before a restart)."""
        self.worker.submit(partial(self._run, job_id, request))
        return job_id

    # ------------------------------------------------------------------ recovery

    def _recover(self) -> None:
        for job_id in self.jobs.ids_with_status("running"):
            self.jobs.fail(job_id, INTERRUPTED)
        self.files.recover(self.models.checkpoint_folders(), self.models.latest_checkpoint_folders())
        for job_id in self.jobs.ids_with_status("queued"):
            self._enqueue(job_id)

    # ------------------------------------------------------------------ running

    def _run(self, job_id: str, request: CreateRLTrainingJob | None) -> None:
        row = self.jobs.row(job_id)
        if row is None or row.status != "queued" or row.request is None or self._stopping.is_set():
            return  # gone, cancelled, or left queued for the next start
        try:
            base_model = self.models.base_model_of(row.model_id)
            spec = self.base_models.get(base_model) if base_model else None
            if spec is None:
                self.jobs.fail(job_id, "the model's base model is not served by this server")
                return
            base = self.models.latest_checkpoint(row.model_id)
            if not self.jobs.start(job_id, base.step):
                return
            if row.kind == "rl":
                req = request or CreateRLTrainingJob.model_validate_json(row.request)
                self._run_rl(job_id, req, spec, base)
            else:
                self._run_sft(job_id, json.loads(row.request), spec, base)
        except Stop as stop:
            self.jobs.fail(job_id, str(stop), stop.status)
        except (UntrainableError, TrainingDataError) as exc:
            self.jobs.fail(job_id, str(exc))
        except Exception as exc:
            log.exception("training job %s failed", job_id)
            self.jobs.fail(job_id, f"{type(exc).__name__}: {exc}")
        finally:
            self._cancel.discard(job_id)

    def _hook(
        self, job_id: str, extra: dict[str, float], steps: list[dict[str, float]]
    ) -> Callable[..., None]:
        def on_step(metrics: dict[str, float]) -> None:
            data = numbers({**metrics, **extra})
            steps.append(data)
            self.jobs.add_event(job_id, "gradient_step", data)
            self._check(job_id)

        return on_step

    def _check(self, job_id: str) -> None:
        self.worker.beat()
        if job_id in self._cancel:
            raise Stop(CANCELLED, "cancelled")
        if self._stopping.is_set():
            raise Stop(INTERRUPTED, "failed")

    def _run_rl(
        self, job_id: str, req: CreateRLTrainingJob, spec: BaseModelSpec, base: CheckpointRow
    ) -> None:
        cfg = resolve(req.experimental_config)
        groups = req.trajectory_groups
        summary = train_metrics(groups)
        job_seed = req.experimental_config.seed if req.experimental_config else None
        plan = plan_rl(groups, cfg, self.trainer.chat_format(spec), seed=base.step, job_seed=job_seed)
        extra = {
            "reward": summary.get("train/reward", 0.0),
            "reward_std_dev": summary.get("train/reward_std_dev", 0.0),
            "exception_rate": summary["train/exception_rate"],
            "num_groups_submitted": float(plan.num_groups),
            "num_groups_trainable": float(plan.num_groups_trainable),
        }
        in_summary = set(extra)  # the checkpoint reports these as train/... and data/...
        extra |= rollout_metrics(groups)
        multiplier = 1.0
        if cfg.scale_learning_rate_by_reward_std_dev:
            multiplier = reward_std_lr_multiplier(
                [
                    *self.models.metric_history(req.model_id, "train/reward_std_dev"),
                    (base.step + 1, extra["reward_std_dev"]),
                ]
            )
        peak = peak_learning_rate(plan, cfg, multiplier)
        warnings = unknown_keys(req.experimental_config)
        lora = self.models.lora_config_of(req.model_id) is not None
        warnings += rl_learning_rate(spec.name, peak, lora=lora) if peak is not None else []
        policy = self._policy(req.model_id, spec, base, job_seed)
        self.jobs.started(job_id, len(plan.batches), warnings, config=asdict(cfg))
        if stale := stale_groups(group_versions(groups), base.step):
            self.jobs.warn(job_id, STALE_GROUPS, stale)
        steps: list[dict[str, float]] = []
        if not plan.batches:
            why = nothing_trained(groups, cfg.packed_sequence_length, base.step)
            self.jobs.warn(job_id, NOTHING_TRAINED, why)
        else:
            reference_at = reference_step(req.experimental_config, base.step)
            reference = self._reference(req.model_id, reference_at, spec)
            run_rl(
                policy,
                plan,
                cfg,
                pad_id=spec.pad_token_id,
                lr_multiplier=multiplier,
                reference=reference,
                on_step=self._hook(job_id, extra, steps),
            )
        metrics = {
            **summary,
            **{
                CHECKPOINT_METRIC_NAMES.get(k, k): v
                for k, v in over_steps(steps).items()
                if k not in in_summary
            },
            "data/step_num_groups_submitted": float(plan.num_groups),
            "data/step_num_groups_trainable": float(plan.num_groups_trainable),
            "data/step_num_gradient_steps": float(len(plan.batches)),
        }
        trained_on = TrainedOn(groups, plan.advantages)
        self._save(job_id, policy, base, metrics, trained=bool(plan.batches), trained_on=trained_on)

    def _run_sft(
        self, job_id: str, request: dict[str, Any], spec: BaseModelSpec, base: CheckpointRow
    ) -> None:
        path = Path(request["path"])
        experimental = ExperimentalSFTConfig.model_validate(request.get("experimental_config") or {})
        fmt = self.trainer.chat_format(spec)
        last_only = request["assistant_turns"] == "last"
        samples: list[Sample] = []
        for line, conversation in enumerate(iter_conversations(path.name, path.read_bytes()), start=1):
            assistant = [i for i, m in enumerate(conversation.messages) if m.get("role") == "assistant"]
            try:
                found = fmt.conversation(
                    conversation.messages, conversation.tools, assistant[-1:] if last_only else assistant
                )
            except Exception as exc:
                raise TrainingDataError(path.name, line, f"cannot apply the chat template ({exc})") from None
            samples += [sample.truncated(spec.max_model_len) for sample in found]
        batches = sft_batches(samples, request["batch_size"], experimental.seed, base.step)
        learning_rates = request["learning_rates"]
        policy = self._policy(base.model_id, spec, base, experimental.seed)
        self.jobs.started(job_id, len(batches), unknown_keys(experimental))
        steps: list[dict[str, float]] = []
        run_sft(
            policy,
            batches,
            learning_rates,
            pad_id=spec.pad_token_id,
            chunk_size=experimental.logprob_calculation_chunk_size or LOGPROB_CHUNK_SIZE,
            on_step=self._hook(job_id, {}, steps),
        )
        metrics = {f"sft/{k}": v for k, v in over_steps(steps).items()}
        metrics["sft/final_loss"] = steps[-1]["loss"] if steps else 0.0
        metrics["data/step_num_gradient_steps"] = float(len(batches))
        self._save(job_id, policy, base, metrics, trained=bool(batches))

    # ------------------------------------------------------------------ models and checkpoints

    def _policy(
        self, model_id: str, spec: BaseModelSpec, base: CheckpointRow, job_seed: int | None
    ) -> Policy:
        weights = Path(base.path) if base.path else None
        optimizer = optimizer_file(weights) if weights else None
        settings = self.models.lora_config_of(model_id)
        return self.trainer.policy(model_id, base.step, spec, weights, settings, optimizer, job_seed)

    def _reference(self, model_id: str, step: int | None, spec: BaseModelSpec) -> PreTrainedModel | None:
        if step is None:
            return None
        row = self.models.checkpoint_at(model_id, step)
        if row is None:
            raise UntrainableError(f"the KL reference checkpoint step {step} does not exist")
        return reference_model(spec, Path(row.path) if row.path else None, self.trainer.placement)

    def _save(
        self,
        job_id: str,
        policy: Policy,
        base: CheckpointRow,
        metrics: dict[str, float],
        *,
        trained: bool,
        trained_on: TrainedOn | None = None,
    ) -> None:
        """Write the checkpoint and its optimizer state (or link the unchanged ones), then the
        checkpoint row, the RL job's trajectories with their advantages and ``training_ended`` at
        once; then drop the optimizer state of ``base``. The steps' freed memory goes back to the
        system first, so a client that sees the job succeed sees the server's memory without it."""
        trim_heap()
        self._check(job_id)
        step = self.models.current_step(base.model_id) + 1
        staging = self.files.stage(base.model_id, step, job_id)
        try:
            if trained:
                policy.save(staging.folder)
                staging.save_optimizer(policy.optimizer_state())
            elif base.path:
                staging.link(Path(base.path))
        except BaseException:
            staging.discard()
            raise
        if trained or base.path:
            folder: Path | None = staging.publish()
        else:  # still the base model: no files of its own
            folder = None
            staging.discard()
        try:
            hold_after_publish()
            job, base_model = self.jobs.row(job_id), self.models.base_model_of(base.model_id) or ""
            assert job is not None  # a running job's row stays until the model is deleted
            spec, placement = self.base_models[base_model], self.trainer.placement
            record = record_fields(job, base.step, spec, folder, placement, numbers(metrics))
            with self.db.write() as conn:
                path = str(folder) if folder else None
                checkpoint_id = self.models.add_checkpoint(
                    base.model_id, step, path, numbers(metrics), trained=trained
                )
                self.records.add(conn, checkpoint_id, record)
                if trained_on is not None:
                    self.logs.record_training(
                        conn, base.model_id, job_id, base.step, step, trained_on.groups, trained_on.advantages
                    )
                self.jobs.succeed(conn, job_id, step, checkpoint_id, trained=trained)
        except BaseException:
            if folder is not None:
                self.files.remove(folder)
            raise
        if base.path:
            self.files.drop_optimizer(Path(base.path))
        self.trainer.keep(policy, step)
        if folder is not None and self.on_checkpoint is not None:
            try:
                self.on_checkpoint(base.model_id, step, folder)
            except Exception:  # the job has succeeded: a hook never changes that
                log.exception("checkpoint hook failed for %s step %d", base.model_id, step)
