"""Token sequences to train on: RL samples from trajectory groups, SFT samples from conversations.

RL uses the engine's own token ids (``prompt_token_ids`` + ``token_ids``) and sampler logprobs of each
trainable Choice, as ART does: a multi-turn trajectory trains every assistant turn (tool calls
included) on the tokens it sampled. Several choices of one history share a sequence while each
prompt extends the tokens before it (the system, user and tool messages and the template's
scaffolding between them carry no loss); a turn whose prompt does not extend them (the template
re-rendered an earlier turn differently from what was sampled, or drops earlier reasoning) starts a
sequence of its own with its own prompt. Conversations (SFT, and choices without token ids when
``allow_training_without_logprobs``) are tokenized with the model's chat template, tool-call
arguments turned into objects as templates expect them, and only the assistant turns (their text,
tool calls and end-of-turn token) carry loss.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...types.training import Choice, History, TrajectoryGroup
from ..engine.codec import Codec
from ..engine.model import BaseModelSpec
from ..engine.template import render_chat
from .loss import balance_advantages, group_advantages, token_weights

NAN = float("nan")
MISSING_TOKEN_IDS = (
    "Trainable Choice is missing vLLM prompt_token_ids/token_ids. "
    "Use a vLLM endpoint with return_token_ids enabled."
)


class UntrainableError(ValueError):
    """The training data cannot be trained as sent; the message says why and where."""


@dataclass
class Sample:
    """One training sequence: tokens, which of them are trained, and (RL) their sampler logprobs."""

    tokens: list[int]
    mask: list[bool]
    logprobs: list[float] = field(default_factory=list)
    advantage: float = 0.0
    weight: float = 1.0
    trajectory: int = 0

    @property
    def num_trained(self) -> int:
        return sum(self.mask)

    def truncated(self, length: int) -> Sample:
        if len(self.tokens) <= length:
            return self
        return Sample(
            self.tokens[:length],
            self.mask[:length],
            self.logprobs[:length],
            self.advantage,
            self.weight,
            self.trajectory,
        )


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates take them: tool-call ``arguments`` sent as JSON strings (the wire
    form) become objects, as vLLM does before templating (a string that is not JSON stays as it is)."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {**message, "tool_calls": [_call_with_object_arguments(c) for c in calls]}
        out.append(message)
    return out


def _call_with_object_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        return call
    try:
        parsed = json.loads(arguments)
    except json.JSONDecodeError:
        return call
    return {**call, "function": {**function, "arguments": parsed}}


class ChatFormat:
    """The model's chat template and tokenizer, rendered and encoded exactly as the engine does."""

    def __init__(self, spec: BaseModelSpec) -> None:
        self.codec = Codec.from_folder(Path(spec.folder))
        self.template = spec.chat_template
        self.eos_ids = set(spec.eos_token_ids)
        self.end_of_turn = spec.eos_token_ids[0]

    def render(self, messages: list[dict[str, Any]], tools: Any, generation_prompt: bool) -> str:
        return render_chat(
            self.template,
            template_messages(messages),
            add_generation_prompt=generation_prompt,
            continue_final_message=False,
            tools=tools,
        )

    def encode(self, text: str) -> list[int]:
        return self.codec.encode(text)

    def completion(self, prompt: str, messages: list[dict[str, Any]], tools: Any) -> list[int]:
        """The tokens the model generates for the last (assistant) message after ``prompt``: what the
        template renders after the prompt, up to the end-of-turn token; for a template whose history
        does not extend its generation prompt, the message's text and an end-of-turn token."""
        full = self.render(messages, tools, False)
        if full.startswith(prompt):
            span = self.encode(full[len(prompt) :])
            ends = [i for i, t in enumerate(span) if t in self.eos_ids]
            return span[: ends[-1] + 1] if ends else span
        content = messages[-1].get("content") or ""
        if not isinstance(content, str):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        return [*self.encode(content), self.end_of_turn]

    def conversation(
        self, messages: list[dict[str, Any]], tools: Any, trained: Sequence[int] | None = None
    ) -> list[Sample]:
        """Training sequences of a conversation: each trained assistant message (all by default)
        follows its generation prompt, exactly as the engine would prompt and stop; later turns
        extend the same sequence while their prompt extends it, else start a new one."""
        if trained is None:
            trained = [i for i, m in enumerate(messages) if m.get("role") == "assistant"]
        samples: list[Sample] = []
        for index in sorted(trained):
            prompt = self.render(messages[:index], tools, True)
            prompt_ids = self.encode(prompt)
            completion = self.completion(prompt, messages[: index + 1], tools)
            current = samples[-1] if samples else None
            if current is not None and prompt_ids[: len(current.tokens)] == current.tokens:
                extra = prompt_ids[len(current.tokens) :]
            else:
                current, extra = Sample([], []), prompt_ids
                samples.append(current)
            current.tokens += extra + completion
            current.mask += [False] * len(extra) + [True] * len(completion)
        return samples


# ----------------------------------------------------------------------------- RL


@dataclass
class RLBatchPlan:
    """The samples of one RL step and the counts its metrics report."""

    samples: list[Sample]
    num_groups: int
    num_groups_trainable: int
    num_trajectories: int
    advantages: list[list[float]]  # per group, per trajectory: the advantage this step uses


def _choice_tokens(
    choice: Choice, where: str, allow_without_logprobs: bool
) -> tuple[list[int], list[int], list[float]] | None:
    """(prompt ids, completion ids, logprobs) of a choice, or None to tokenize it from its messages."""
    prompt_ids, token_ids = choice.prompt_token_ids, choice.token_ids
    if prompt_ids is None or token_ids is None:
        if allow_without_logprobs:
            return None
        raise UntrainableError(f"{where}: {MISSING_TOKEN_IDS}")
    content = choice.logprobs.content if choice.logprobs is not None else None
    if content is None:
        return list(prompt_ids), list(token_ids), [NAN] * len(token_ids)
    if len(content) != len(token_ids):
        raise UntrainableError(
            f"{where}: {len(content)} logprobs for {len(token_ids)} token_ids; they must match one to one"
        )
    return list(prompt_ids), list(token_ids), [float(t.logprob) for t in content]


def _history_samples(
    history: History, where: str, fmt: ChatFormat, allow_without_logprobs: bool
) -> list[Sample]:
    samples: list[Sample] = []
    current: Sample | None = None
    for position, item in enumerate(history.messages_and_choices):
        if not isinstance(item, Choice):
            continue
        at = f"{where}, message {position}"
        if item.logprobs is None and not allow_without_logprobs:
            raise UntrainableError(
                f"{at}: the Choice has no logprobs. Request them (logprobs=True, return_token_ids=True) "
                "or set allow_training_without_logprobs"
            )
        parts = _choice_tokens(item, at, allow_without_logprobs)
        if parts is None:
            messages = history.messages()[: position + 1]
            tools = [t.model_dump(mode="json", exclude_none=True) for t in history.tools or []] or None
            prompt = fmt.render(messages[:-1], tools, True)
            prompt_ids, token_ids = fmt.encode(prompt), fmt.completion(prompt, messages, tools)
            logprobs = [NAN] * len(token_ids)
        else:
            prompt_ids, token_ids, logprobs = parts
        if current is not None and prompt_ids[: len(current.tokens)] == current.tokens:
            extra = prompt_ids[len(current.tokens) :]
        else:
            if current is not None:
                samples.append(current)
            current = Sample([], [], [])
            extra = prompt_ids
        current.tokens += extra + token_ids
        current.mask += [False] * len(extra) + [True] * len(token_ids)
        current.logprobs += [NAN] * len(extra) + logprobs
    if current is not None:
        samples.append(current)
    return samples


def rl_samples(
    groups: Sequence[TrajectoryGroup],
    fmt: ChatFormat,
    *,
    scale_rewards: bool,
    advantage_balance: float,
    allow_without_logprobs: bool,
) -> RLBatchPlan:
    """Advantages per group; trajectories with zero advantage are dropped (all of a zero-variance group).
    The plan's ``advantages`` hold, per group and trajectory, the advantage the job uses: the balanced
    one for trained trajectories, the group advantage for the others."""
    samples: list[Sample] = []
    per_group: list[list[float]] = []
    positions: list[tuple[int, int]] = []
    trainable_groups = 0
    trajectory_tokens: list[int] = []
    trajectory_advantages: list[float] = []
    for g, group in enumerate(groups):
        advantages = group_advantages([t.reward for t in group.trajectories], scale_rewards)
        if not all(math.isfinite(a) for a in advantages):
            raise UntrainableError(
                f"group {g}: its rewards are so far apart that reward minus mean is beyond the float"
                " range; keep scale_rewards on (the default) or bring the rewards closer together"
            )
        per_group.append(list(advantages))
        kept = False
        for t, (trajectory, advantage) in enumerate(zip(group.trajectories, advantages, strict=True)):
            if advantage == 0:
                continue
            histories = [
                History(messages_and_choices=trajectory.messages_and_choices, tools=trajectory.tools),
                *trajectory.additional_histories,
            ]
            where = f"group {g}, trajectory {t}"
            found = [
                s
                for h, history in enumerate(histories)
                for s in _history_samples(
                    history, where if h == 0 else f"{where}, history {h}", fmt, allow_without_logprobs
                )
            ]
            if not found:
                continue
            index = len(trajectory_tokens)
            for sample in found:
                sample.advantage, sample.trajectory = advantage, index
            trajectory_tokens.append(sum(s.num_trained for s in found))
            trajectory_advantages.append(advantage)
            positions.append((g, t))
            samples += found
            kept = True
        trainable_groups += kept
    weights = token_weights(trajectory_tokens)
    balanced = balance_advantages(trajectory_advantages, trajectory_tokens, weights, advantage_balance)
    for sample in samples:
        sample.weight = weights[sample.trajectory]
        sample.advantage = balanced[sample.trajectory]
    for (g, t), advantage in zip(positions, balanced, strict=True):
        per_group[g][t] = advantage
    return RLBatchPlan(samples, len(groups), trainable_groups, len(trajectory_tokens), per_group)


def pack(samples: Sequence[Sample], length: int, seed: int) -> list[list[Sample]]:
    """Shuffle, truncate samples to ``length`` tokens, fill minibatches of at most ``length`` tokens."""
    order = list(samples)
    random.Random(seed).shuffle(order)
    batches: list[list[Sample]] = []
    used = math.inf
    for sample in order:
        sample = sample.truncated(length)
        if sample.num_trained == 0:
            continue
        if used + len(sample.tokens) > length:
            batches.append([])
            used = 0
        batches[-1].append(sample)
        used += len(sample.tokens)
    return batches
