"""Wire models of the chat-completion endpoint (vLLM/OpenAI format; spec: chat-completions.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from .common import WireModel
from .training import Choice, ChoiceLogprobs, ChoiceMessage, ToolCall, ToolFunction

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class StreamOptions(WireModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class JsonSchemaFormat(WireModel):
    name: str
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(WireModel):
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputs(WireModel):
    json_: str | dict[str, Any] | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_fallback: bool = False
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: str | None = None


class LogitsProcessorConstructor(WireModel):
    qualname: str
    args: list[Any] | None = None
    kwargs_: dict[str, Any] | None = Field(default=None, alias="kwargs")


class ChatTool(WireModel):
    """A function the model may call: ``parameters`` is a JSON Schema (omitted: no parameters)."""

    type: Literal["function"] = "function"
    function: ToolFunction


class NamedFunction(WireModel):
    name: str


class NamedToolChoice(WireModel):
    """``tool_choice`` naming the function the model must call."""

    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class ChatCompletionRequest(WireModel):
    """Every field of interface.md part 2. Unknown top-level fields are accepted and ignored."""

    messages: list[dict[str, Any]]
    model: str | None = None
    frequency_penalty: float | None = 0.0
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = False
    top_logprobs: int | None = 0
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = 1
    presence_penalty: float | None = 0.0
    response_format: ResponseFormat | None = None
    seed: Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)] | None = None
    stop: str | Annotated[list[str], Field(max_length=4)] | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[ChatTool] | None = None
    tool_choice: ToolChoice | None = None  # default: "auto" with tools, else "none"
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = None
    include_reasoning: bool = True
    parallel_tool_calls: bool | None = True
    user: str | None = None
    use_beam_search: bool = False
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    length_penalty: float = 1.0
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Annotated[int, Field(ge=-1, le=INT64_MAX)] | None = None
    prompt_logprobs: int | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] = Field(default_factory=list)
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    documents: list[dict[str, Any]] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    structured_outputs: StructuredOutputs | None = None
    priority: Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)] = 0
    request_id: str | None = None
    logits_processors: list[str | LogitsProcessorConstructor] | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    cache_salt: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, Any] | None = None


class PromptTokensDetails(WireModel):
    cached_tokens: int = 0


class Usage(WireModel):
    """Token counts (vLLM's key order); ``cached_tokens`` are prompt tokens served from the prefix cache."""

    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None
    completion_tokens_details: dict[str, int] | None = None


class AssistantMessage(WireModel):
    """The generated message of a choice; ``tool_calls`` is left out of the JSON when there are none."""

    role: str = "assistant"
    content: str | None = None
    refusal: str | None = None
    annotations: list[dict[str, Any]] | None = None
    audio: dict[str, Any] | None = None
    function_call: dict[str, Any] | None = None
    tool_calls: list[ToolCall] | None = None
    reasoning: str | None = None

    @model_serializer(mode="wrap")
    def _omit_empty_tool_calls(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if not data.get("tool_calls"):
            data.pop("tool_calls", None)
        return data


class ChatCompletionChoice(WireModel):
    index: int
    message: AssistantMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None


class ChatCompletion(WireModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatCompletionChoice]
    service_tier: str | None = None
    system_fingerprint: str | None = None
    usage: Usage
    prompt_logprobs: list[dict[str, Any] | None] | None = None
    prompt_token_ids: list[int] | None = None
    kv_transfer_params: dict[str, Any] | None = None

    def trainable_choice(self, index: int = 0) -> Choice:
        """Choice ``index`` as a trajectory carries it: message, logprobs and token ids (request them
        with ``logprobs=True`` and ``return_token_ids=True``)."""
        choice = next(c for c in self.choices if c.index == index)
        message = ChoiceMessage(
            role=choice.message.role,
            content=choice.message.content,
            refusal=choice.message.refusal,
            tool_calls=choice.message.tool_calls,
            reasoning=choice.message.reasoning,
        )
        return Choice(
            index=choice.index,
            message=message,
            finish_reason=choice.finish_reason,
            logprobs=choice.logprobs,
            token_ids=choice.token_ids,
            prompt_token_ids=self.prompt_token_ids,
        )


class DeltaFunctionCall(WireModel):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(WireModel):
    """A piece of a streamed tool call: the first piece of call ``index`` carries ``id``, ``type``
    and ``function.name``; later pieces carry ``function.arguments`` fragments to append."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall | None = None


class DeltaMessage(WireModel):
    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[DeltaToolCall] | None = None


class ChunkChoice(WireModel):
    index: int
    delta: DeltaMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None


class ChatCompletionChunk(WireModel):
    """One SSE event of a stream; the server writes only the keys it set (vLLM's ``exclude_unset``)."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    prompt_token_ids: list[int] | None = None

    def wire_json(self) -> str:
        """The event's JSON as vLLM writes it: set keys only, and no nulls in the usage-only chunk."""
        return self.model_dump_json(exclude_unset=True, exclude_none=not self.choices)


class ProjectUsage(WireModel):
    """Chat usage of one team/project and model (``GET /v1/usage``, an extension)."""

    project: str
    model: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cached_tokens: int


class UsageReport(WireModel):
    object: Literal["list"] = "list"
    data: list[ProjectUsage]


class ModelCard(WireModel):
    """An entry of ``GET /v1/models`` (OpenAI list shape, vLLM's extra keys)."""

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "toolkit"
    root: str | None = None
    parent: str | None = None
    max_model_len: int | None = None


class ModelCardList(WireModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
