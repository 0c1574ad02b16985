"""Wire models of the training API (spec: interface.md part 2 and 4, training-api.md).

Both payload styles of ART are accepted: 0.5.18 sends every field explicitly, 0.5.23 omits
defaults (a trajectory without ``reward`` has reward 0.0) and sends explicit nulls in
``experimental_config`` that mean "use the default"; choices carry extra keys such as
``prompt_token_ids`` and ``token_ids``, which are kept.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Discriminator, Field, FiniteFloat, Tag, model_validator

from .common import DateTime, ListEnvelope, WireModel

Scalar = float | int | str | bool | None
Number = float | int
NamePart = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.\-]+$")]


# ----------------------------------------------------------------------------- models


LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
ModuleName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.]+$")]


class LoRAConfig(WireModel):
    """Extension: the LoRA adapter a model trains, in ART's ``lora_config`` names (``rank``, ``alpha``,
    ``dropout``, ``target_modules``, ``use_rslora``) with ART's defaults; saved in each checkpoint's
    ``adapter_config.json`` as peft's ``r``, ``lora_alpha``, ``lora_dropout``, ...

    ``target_modules`` are module-name suffixes of the base model (peft's meaning). The scaling of
    the adapter's output is ``alpha / rank`` (``alpha / sqrt(rank)`` with ``use_rslora``).
    """

    model_config = ConfigDict(extra="forbid")  # a misspelt key (peft's ``r``) must not fall back silently

    rank: Annotated[int, Field(ge=1, le=512)] = 8
    alpha: Annotated[int, Field(ge=1)] = 16
    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    target_modules: Annotated[list[ModuleName], Field(min_length=1)] = Field(
        default_factory=lambda: list(LORA_TARGET_MODULES)
    )
    use_rslora: bool = False


class ModelCreate(WireModel):
    """Body of ``POST /v1/preview/models`` (what ART sends). ``lora_config`` and ``full_finetuning``
    are extensions: how the model trains (default: a LoRA adapter with ART's settings, or full
    fine-tuning for the tiny built-in models; docs/training.md "LoRA")."""

    entity: NamePart | None = None
    project: NamePart
    name: NamePart
    base_model: Annotated[str, Field(min_length=1)]
    return_existing: bool = False
    lora_config: LoRAConfig | None = None
    full_finetuning: bool | None = None

    @model_validator(mode="after")
    def _one_training_mode(self) -> ModelCreate:
        if self.full_finetuning and self.lora_config is not None:
            raise ValueError("give lora_config or full_finetuning: true, not both")
        return self


class Model(WireModel):
    """A trainable model (``ModelResponse``). ``full_finetuning`` and ``lora_config`` (null when
    fully fine-tuned) are extensions: None where a deployment does not report them."""

    id: str
    entity: str
    project: str
    name: str
    base_model: str
    run_id: str | None = None
    created_at: DateTime | None = None
    latest_step: int | None = None
    full_finetuning: bool | None = None
    lora_config: LoRAConfig | None = None


class DeleteModelResponse(WireModel):
    model_id: str
    deleted_checkpoints: int
    deleted_run: bool
    deleted_artifacts: int = 0
    deleted_trajectories: int = 0


# ----------------------------------------------------------------------------- checkpoints


class Checkpoint(WireModel):
    id: str
    step: int
    metrics: dict[str, Number] = Field(default_factory=dict)
    created_at: DateTime | None = None
    trained: bool | None = None  # extension: false when its job trained nothing; None: step 0, unsaid


CheckpointList = ListEnvelope[Checkpoint]


class CheckpointFile(WireModel):
    name: str
    size: int
    sha256: str


class CheckpointFiles(WireModel):
    """Extension: the files of one checkpoint (``GET .../checkpoints/{step}/files``). ``format`` is
    ``"peft-lora"`` for a peft adapter folder (``adapter_config.json``, ``adapter_model.safetensors``)
    or ``"full"`` for whole weights (``model.safetensors``)."""

    model_id: str
    step: int
    base_model: str
    format: Literal["peft-lora", "full"]
    files: list[CheckpointFile]


class DeleteCheckpointsRequest(WireModel):
    steps: list[Annotated[int, Field(ge=0)]]


class DeleteCheckpointsResponse(WireModel):
    deleted_count: int
    not_found_steps: list[int]
    kept_steps: list[int] = Field(default_factory=list)  # extension: requested steps that were kept


# ----------------------------------------------------------------------------- trajectories


class ToolCallFunction(WireModel):
    name: str
    arguments: str = ""


class ToolCall(WireModel):
    id: str | None = None
    type: str = "function"
    function: ToolCallFunction


class ChatMessage(WireModel):
    """A prompt/context message of a trajectory (developer, system, user, assistant, tool, ...)."""

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class ChoiceMessage(WireModel):
    role: str = "assistant"
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None


class TopLogprob(WireModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(WireModel):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(WireModel):
    content: list[TokenLogprob] | None = None
    refusal: list[TokenLogprob] | None = None


class Choice(WireModel):
    """A model output inside a trajectory: the trainable assistant turn.

    Extra keys (``prompt_token_ids``, ``token_ids``, ...) ride along and are kept.
    """

    index: int = 0
    message: ChoiceMessage
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None


def _message_or_choice(value: Any) -> str:
    if isinstance(value, Choice) or (isinstance(value, dict) and "message" in value):
        return "choice"
    return "message"


MessageOrChoice = Annotated[
    Annotated[ChatMessage, Tag("message")] | Annotated[Choice, Tag("choice")],
    Discriminator(_message_or_choice),
]


class ToolFunction(WireModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(WireModel):
    type: str = "function"
    function: ToolFunction


def as_message(item: ChatMessage | Choice) -> dict[str, Any]:
    """A message or a choice as a chat message (a choice becomes an assistant message, content "" if null)."""
    if isinstance(item, Choice):
        message = item.message.model_dump(mode="json", exclude_none=True)
        return {**message, "role": "assistant", "content": item.message.content or ""}
    return item.model_dump(mode="json", exclude_none=True)


class History(WireModel):
    messages_and_choices: list[MessageOrChoice] = Field(default_factory=list)
    tools: list[Tool] | None = None

    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of this history, choices turned into assistant messages (as ART does)."""
        return [as_message(m) for m in self.messages_and_choices]


class PydanticException(WireModel):
    type: str
    message: str
    traceback: str = ""


class Trajectory(WireModel):
    messages_and_choices: list[MessageOrChoice] = Field(default_factory=list)
    reward: FiniteFloat = 0.0  # NaN and infinities are a 422: they would poison every mean
    tools: list[Tool] | None = None
    additional_histories: list[History] = Field(default_factory=list)
    initial_policy_version: int | None = None
    final_policy_version: int | None = None
    metrics: dict[str, Number | bool] = Field(default_factory=dict)
    auto_metrics: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Scalar] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)
    start_time: DateTime | None = None

    def choices(self) -> list[Choice]:
        return [m for m in self.messages_and_choices if isinstance(m, Choice)]

    def messages(self) -> list[dict[str, Any]]:
        """The chat messages of this trajectory, choices turned into assistant messages (as ART does)."""
        return [as_message(m) for m in self.messages_and_choices]


class TrajectoryGroup(WireModel):
    trajectories: list[Trajectory]
    exceptions: list[PydanticException] = Field(default_factory=list)
    metadata: dict[str, Scalar] = Field(default_factory=dict)
    metrics: dict[str, Number | bool] = Field(default_factory=dict)
    logs: list[str] = Field(default_factory=list)


class LogRequest(WireModel):
    """Body of ``POST /v1/preview/models/{id}/log`` (ART also sends ``model_id``, ignored)."""

    split: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.\-]+$")]
    trajectory_groups: list[TrajectoryGroup]
    # extension: the checkpoint step the groups belong to (an evaluation of an older checkpoint);
    # left out, the model's current step, as the hosted API files them
    step: Annotated[int | None, Field(ge=0, le=2**63 - 1)] = None


class LogResponse(WireModel):
    """What ``/log`` stored and the metrics it computed. The hosted API documents an empty body
    (``{}``), so every field is None there; the local server fills them all."""

    model_id: str | None = None
    split: str | None = None
    step: int | None = None
    checkpoint_id: str | None = None
    num_groups: int | None = None
    num_trajectories: int | None = None
    metrics: dict[str, float] | None = None


# ----------------------------------------------------------------------------- training jobs


MAX_NUM_ITERATIONS = 64
JobSeed = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]
"""A job's seed (an extension): when set, the server derives from it the SFT data order, the
minibatch order of every pass and a fresh LoRA adapter's initialisation; absent, those are fixed
(file order, passes shuffled by the base step, adapter seed 0)."""


class ExperimentalTrainingConfig(WireModel):
    """The experimental RL config: every key optional; an explicit null means "use the default".

    The model-family key ``<model>_k2_tau`` of interface.md is ``kimi_k2_tau`` on the wire. Known
    keys with a wrong type are a 422; unknown keys (a newer ART may send keys this server does not
    know) are accepted, ignored, and named in a warning of the job's ``training_started`` event.
    ``num_iterations`` (the local server's; TRL's and Unsloth's name for PPO's epochs per batch, mu)
    replays the step's minibatches that many times, each pass in a new order. ``seed`` (the local
    server's) orders the minibatches of every pass and initialises a fresh LoRA adapter.
    """

    advantage_balance: float | None = None
    allow_training_without_logprobs: bool | None = None
    epsilon: float | None = None
    epsilon_high: float | None = None
    importance_sampling_level: Literal["token", "sequence", "average", "geometric_average"] | None = None
    kimi_k2_tau: float | None = None
    kl_penalty_coef: float | None = None
    kl_penalty_reference_step: Annotated[int, Field(ge=0)] | None = None
    kl_penalty_source: Literal["sample", "current_learner"] | None = None
    kl_penalty_step_lag: Annotated[int, Field(ge=1)] | None = None
    kl_ref_adapter_path: str | None = None
    learning_rate: Annotated[float, Field(gt=0)] | None = None
    logprob_calculation_chunk_size: Annotated[int, Field(ge=1)] | None = None
    loss_fn: Literal["cispo", "ppo"] | None = None
    mask_prob_ratio: bool | None = None
    max_negative_advantage_importance_sampling_weight: Annotated[float, Field(gt=0)] | None = None
    normalize_advantages: bool | None = None
    num_iterations: Annotated[int, Field(ge=1, le=MAX_NUM_ITERATIONS)] | None = None
    num_trajectories_learning_rate_multiplier_power: float | None = None
    packed_sequence_length: Annotated[int, Field(ge=1)] | None = None
    plot_tensors: bool | None = None
    ppo: bool | None = None
    precalculate_logprobs: bool | None = None
    scale_learning_rate_by_reward_std_dev: bool | None = None
    scale_rewards: bool | None = None
    seed: JobSeed | None = None
    truncated_importance_sampling: Annotated[float, Field(gt=0)] | None = None

    @model_validator(mode="after")
    def _one_kl_reference(self) -> ExperimentalTrainingConfig:
        if self.kl_penalty_step_lag is not None and self.kl_penalty_reference_step is not None:
            raise ValueError("give kl_penalty_step_lag or kl_penalty_reference_step, not both")
        return self


class CreateRLTrainingJob(WireModel):
    model_id: str
    trajectory_groups: list[TrajectoryGroup]
    experimental_config: ExperimentalTrainingConfig | None = None


class MetricLogging(WireModel):
    enabled: bool = False
    target_training_step: int | None = None


class SFTTrainingConfig(WireModel):
    batch_size: Annotated[int, Field(ge=1)] | Literal["auto"] | None = None
    learning_rate: Annotated[float, Field(gt=0)] | list[Annotated[float, Field(gt=0)]] | None = None
    assistant_turns: Literal["all", "last"] | None = None
    metric_logging: MetricLogging | None = None


class ExperimentalSFTConfig(WireModel):
    """The experimental SFT config (an open object in the hosted schema; ART sends none). Unknown
    keys are accepted, ignored and named in a warning, as for RL. ``seed`` (an extension) shuffles
    the examples before they are cut into batches."""

    logprob_calculation_chunk_size: Annotated[int, Field(ge=1)] | None = None
    seed: JobSeed | None = None


class CreateSFTTrainingJob(WireModel):
    model_id: str
    training_data_url: Annotated[str, Field(min_length=1)]
    config: SFTTrainingConfig | None = None
    experimental_config: ExperimentalSFTConfig | None = None


class TrainingJobCreated(WireModel):
    id: str


JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
JobKind = Literal["rl", "sft"]


class TrainingJob(WireModel):
    """A training job. The spec publishes only ``id``; the rest is this server's extension.
    ``queue_position``: while queued, how many queued jobs run before it (0: next to run)."""

    id: str
    model_id: str | None = None
    kind: JobKind | None = None
    status: JobStatus | None = None
    created_at: DateTime | None = None
    started_at: DateTime | None = None
    finished_at: DateTime | None = None
    base_step: int | None = None
    result_step: int | None = None
    checkpoint_id: str | None = None
    num_sequences: int | None = None
    error: str | None = None
    queue_position: int | None = None


# ``queued`` {ahead} and ``warning`` {code, message} are extensions (docs/interfaces.md, "Training jobs")
EventType = Literal[
    "queued", "training_started", "gradient_step", "warning", "training_ended", "training_failed"
]
TERMINAL_EVENTS: tuple[EventType, ...] = ("training_ended", "training_failed")  # a job has exactly one

# gradient_step keys -> the names ART's client files them under (a checkpoint's metrics use these)
CHECKPOINT_METRIC_NAMES = {
    "loss": "loss/train",
    "grad_norm": "loss/grad_norm",
    "learning_rate": "loss/learning_rate",
    "entropy": "loss/entropy",
    "kl_policy_ref": "loss/kl_policy_ref",
    "num_trainable_tokens": "data/step_trainable_assistant_tokens",
    "num_tokens": "data/step_num_tokens",
    "num_trajectories": "data/step_num_trajectories",
}


class TrainingJobEvent(WireModel):
    id: str
    type: EventType
    data: dict[str, Any] = Field(default_factory=dict)
    created_at: DateTime | None = None


TrainingJobEventList = ListEnvelope[TrainingJobEvent]


# ----------------------------------------------------------------------------- artifacts


class Artifact(WireModel):
    """Uploaded SFT training data; ``url`` is what ``training_data_url`` takes."""

    id: str
    url: str
    entity: str
    project: str
    name: str
    version: int
    files: list[str]
    num_records: int
    created_at: DateTime | None = None
