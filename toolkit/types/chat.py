"""Wire models of the chat-completion endpoint (vLLM/OpenAI format; spec: chat-completions.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from .common import WireModel
from .training import ChoiceLogprobs, ChoiceMessage, ToolCall

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
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
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
    prompt_tokens: int = 0
    total_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class ChatCompletionChoice(WireModel):
    index: int
    message: ChoiceMessage
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
    usage: Usage
    service_tier: str | None = None
    system_fingerprint: str | None = None
    prompt_logprobs: list[dict[str, Any] | None] | None = None
    prompt_token_ids: list[int] | None = None
    kv_transfer_params: dict[str, Any] | None = None


class DeltaMessage(WireModel):
    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] | None = None


class ChunkChoice(WireModel):
    index: int
    delta: DeltaMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None


class ChatCompletionChunk(WireModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None
    prompt_token_ids: list[int] | None = None


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
