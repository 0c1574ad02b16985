"""JobLauncher: pick or create a model, choose RL or SFT, set the config, validate, launch, monitor."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from typing import Any

import ipywidgets as w
from pydantic import ValidationError
from traitlets import List, Unicode

from ..client import Client, TrainingJobWarning
from ..client.sft_data import train_jsonl
from ..rollouts import rl_untrainable
from ..types.training import ExperimentalTrainingConfig, Model, SFTTrainingConfig, TrajectoryGroup
from ._base import ToolkitWidget
from ._common import StatusLine, button
from .monitor import JobMonitor

RL_LEARNING_RATE, SFT_LEARNING_RATE = 5e-6, 5e-5
# The defaults of the experimental RL keys as ART's trainer applies them (training-api.md section 4),
# shown as placeholders: an empty field sends nothing and the service uses its default.
RL_DEFAULTS: dict[str, str] = {
    "advantage_balance": "0.0",
    "allow_training_without_logprobs": "false",
    "epsilon": "1.0 (cispo) / 0.2 (ppo)",
    "epsilon_high": "4.0 (cispo) / epsilon (ppo)",
    "importance_sampling_level": "token",
    "kimi_k2_tau": "off",
    "kl_penalty_coef": "0.0",
    "kl_penalty_reference_step": "off",
    "kl_penalty_source": "current_learner (sample if kl_penalty_coef > 0)",
    "kl_penalty_step_lag": "off",
    "kl_ref_adapter_path": "off",
    "logprob_calculation_chunk_size": "1024",
    "loss_fn": "cispo",
    "mask_prob_ratio": "false",
    "max_negative_advantage_importance_sampling_weight": "off",
    "normalize_advantages": "true",
    "num_iterations": "1",
    "num_trajectories_learning_rate_multiplier_power": "0.0",
    "packed_sequence_length": "1024",
    "plot_tensors": "false",
    "ppo": "false",
    "precalculate_logprobs": "false",
    "scale_learning_rate_by_reward_std_dev": "false",
    "scale_rewards": "true",
    "truncated_importance_sampling": "off",
}
WIDE = {"description_width": "initial"}
NO_LOGPROBS = (
    "{count} choice(s) lack the logprobs or token ids an RL job trains on ({first}{more}): request "
    "logprobs=True and return_token_ids=True in the rollout, or set allow_training_without_logprobs to true"
)


class JobLauncher(ToolkitWidget):
    """Launch an RL job from trajectory groups, or an SFT job from JSONL conversations.

    :meth:`start` (or the first display) loads the models. :meth:`validate` lists what is wrong before
    anything is sent (also the groups an RL job would refuse for lack of logprobs or token ids);
    :meth:`launch` creates the job and returns (and shows) a started :class:`JobMonitor`; what the
    client warns about at creation (groups sampled from an older checkpoint) shows in the status line.
    State traits: ``problems`` (of the last validation) and ``job_id`` (the launched job).
    """

    problems = List(Unicode())
    job_id = Unicode(None, allow_none=True)

    def __init__(
        self,
        client: Client,
        *,
        groups: Sequence[TrajectoryGroup] = (),
        model_id: str | None = None,
        project: str = "notebooks",
        base_model: str = "",
        interval: float = 1.0,
    ) -> None:
        self.client = client
        self.groups = list(groups)
        self.interval = interval
        self.monitor: JobMonitor | None = None
        self._select = model_id
        self.model = w.Dropdown(description="model", options=[], style=WIDE, layout=w.Layout(width="420px"))
        self.new_project = w.Text(value=project, description="project")
        self.new_name = w.Text(placeholder="name", description="name")
        self.new_base = w.Text(value=base_model, placeholder="base model", description="base")
        self.kind = w.ToggleButtons(options=[("RL", "rl"), ("SFT", "sft")], value="rl")
        self.learning_rate = w.FloatText(value=RL_LEARNING_RATE, description="learning rate", style=WIDE)
        self.batch_size = w.Text(value="auto", description="batch size", style=WIDE)
        self.experimental = {
            name: w.Text(placeholder=RL_DEFAULTS.get(name, ""), description=name, style=WIDE)
            for name in ExperimentalTrainingConfig.model_fields
            if name != "learning_rate"
        }
        self.sft_data = w.Textarea(
            value=train_jsonl(t for g in self.groups for t in g.trajectories).decode(),
            placeholder='train.jsonl: {"messages": [...]} per line',
            layout=w.Layout(width="100%", height="120px"),
        )
        self.status_line = StatusLine()
        self.output = w.VBox()
        self.kind.observe(self._kind_changed, "value")
        self.rl_box = w.Accordion(
            [w.VBox(list(self.experimental.values()))], titles=("Experimental RL config (empty = default)",)
        )
        self.sft_box = w.VBox([self.batch_size, self.sft_data], layout=w.Layout(display="none"))
        super().__init__(
            [
                w.HBox(
                    [
                        self.model,
                        button("Refresh", self.action("load models", self.refresh_models), icon="refresh"),
                    ]
                ),
                w.HBox(
                    [
                        self.new_project,
                        self.new_name,
                        self.new_base,
                        button("Create model", self.action("create model", self._create), icon="plus"),
                    ]
                ),
                w.HBox([self.kind, self.learning_rate]),
                self.rl_box,
                self.sft_box,
                w.HBox(
                    [
                        button("Validate", self._validate_clicked, icon="check"),
                        button("Launch", self._launch_clicked, "success", "play"),
                    ]
                ),
                self.status_line,
                self.output,
            ]
        )

    # ------------------------------------------------------------------ logic

    def _start(self) -> None:
        self.refresh_models(select=self._select)

    def refresh_models(self, select: str | None = None) -> list[Model]:
        models = self.client.models.list()
        current = select or self.model.value
        self.model.options = [(f"{m.project}/{m.name} ({m.base_model})", m.id) for m in models]
        ids = [m.id for m in models]
        self.model.value = current if current in ids else (ids[0] if ids else None)
        return models

    def create_model(self, name: str, base_model: str | None = None, project: str | None = None) -> Model:
        """Register a model (idempotent) and select it."""
        model = self.client.models.create(
            project=project or self.new_project.value, name=name, base_model=base_model or self.new_base.value
        )
        self.refresh_models(select=model.id)
        return model

    def experimental_config(self) -> ExperimentalTrainingConfig:
        """The RL config of the form: filled fields only (raises ``ValidationError``)."""
        values: dict[str, Any] = {k: f.value.strip() for k, f in self.experimental.items() if f.value.strip()}
        values["learning_rate"] = self.learning_rate.value
        return ExperimentalTrainingConfig.model_validate(values)

    def sft_config(self) -> SFTTrainingConfig:
        batch = self.batch_size.value.strip() or "auto"
        return SFTTrainingConfig.model_validate(
            {"batch_size": batch, "learning_rate": self.learning_rate.value}
        )

    def validate(self) -> list[str]:
        """Everything that would make the launch fail, as readable lines (empty means ready)."""
        problems = [] if self.model.value else ["choose or create a model"]
        try:
            config = self.experimental_config() if self.kind.value == "rl" else self.sft_config()
        except ValidationError as exc:
            config = None
            problems += [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        if self.kind.value == "sft":
            problems += _check_jsonl(self.sft_data.value)
        elif not any(g.trajectories for g in self.groups):
            problems.append("no trajectory groups to train on")
        elif isinstance(config, ExperimentalTrainingConfig) and not config.allow_training_without_logprobs:
            untrainable = rl_untrainable(self.groups)
            if untrainable:
                more = f", and {len(untrainable) - 1} more" if len(untrainable) > 1 else ""
                problems.append(NO_LOGPROBS.format(count=len(untrainable), first=untrainable[0], more=more))
        self.problems = problems
        return problems

    def launch(self) -> JobMonitor:
        """Validate, create the job, and show its monitor (raises ``ValueError`` listing the problems)."""
        problems = self.validate()
        if problems:
            self.status_line.error("\n".join(problems))
            raise ValueError("; ".join(problems))
        model_id = self.model.value
        told: list[str] = []
        if self.kind.value == "rl":
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", TrainingJobWarning)
                created = self.client.training_jobs.create(
                    model_id=model_id,
                    trajectory_groups=self.groups,
                    experimental_config=self.experimental_config(),
                )
            for warning in caught:  # ours go to the status line, any other is shown as usual
                if issubclass(warning.category, TrainingJobWarning):
                    told.append(str(warning.message))
                else:
                    warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
        else:
            records = [json.loads(line) for line in self.sft_data.value.splitlines() if line.strip()]
            created = self.client.sft_training_jobs.create_from_data(
                model_id=model_id, data=records, config=self.sft_config()
            )
        if self.monitor is not None:
            self.monitor.close()
        self.monitor = JobMonitor(self.client, created.id, interval=self.interval)
        self.job_id = created.id
        if told:
            self.status_line.warn("\n".join([f"launched job {created.id}", *told]))
        else:
            self.status_line.ok(f"launched job {created.id}")
        self.output.children = [self.monitor]
        self.monitor.start()
        return self.monitor

    def summary(self) -> str:
        launched = f", launched job {self.job_id[:8]}" if self.job_id else ""
        return f"JobLauncher: {self.kind.value.upper()} on {self.model.label or 'no model'}{launched}"

    # ------------------------------------------------------------------ events

    def _kind_changed(self, change: dict[str, Any]) -> None:
        rl = change["new"] == "rl"
        self.rl_box.layout.display = None if rl else "none"
        self.sft_box.layout.display = "none" if rl else None
        self.learning_rate.value = RL_LEARNING_RATE if rl else SFT_LEARNING_RATE

    def _create(self) -> None:
        self.create_model(self.new_name.value)
        self.status_line.ok("model ready")

    def _validate_clicked(self) -> bool:
        problems = self.validate()
        if problems:
            self.status_line.error("\n".join(problems))
        else:
            self.status_line.ok("ready to launch")
        return not problems

    def _launch_clicked(self) -> None:
        if self._validate_clicked():
            self.action("launch", self.launch)()


def _check_jsonl(text: str) -> list[str]:
    problems = []
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return ["no SFT training data"]
    for n, line in enumerate(lines, 1):
        try:
            messages = json.loads(line)["messages"]
        except (ValueError, KeyError, TypeError):
            problems.append(f"line {n}: not a JSON object with messages")
            continue
        if not messages or messages[-1].get("role") != "assistant":
            problems.append(f"line {n}: the last message must be the assistant's")
    return problems
