"""Helpers of the training tests: models, fixed answers scored through the chat endpoint, choices."""

from __future__ import annotations

import time
import uuid
from typing import Any

import toolkit as tk
from toolkit.client.jobs import TrainingJobHandle
from toolkit.tasks import reverse
from toolkit.types.training import Model, TrainingJob, TrainingJobEvent

BASE = "toolkit/tiny-chat-1m"
IM_END = 257
TERMINAL = ("succeeded", "failed", "cancelled")


def new_model(client: tk.Client, prefix: str) -> Model:
    return client.models.create(
        project="tests-training", name=f"{prefix}-{uuid.uuid4().hex[:8]}", base_model=BASE
    )


def served(model: Model, step: int) -> str:
    return f"wandb-artifact:///{model.entity}/{model.project}/{model.name}:step{step}"


def prompt(word: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"reverse {word}"}]


def scored_answer(
    client: tk.Client, model: str, word: str, answer: str
) -> tuple[list[int], list[int], list[float]]:
    """(prompt ids, answer ids, logprob of each answer token) of ``answer`` right after the generation
    prompt, as the served ``model`` scores it (prompt_logprobs of a continued assistant message)."""
    messages = prompt(word)
    gen = client.chat.completions.create(model=model, messages=messages, max_tokens=1, return_token_ids=True)
    head = gen.prompt_token_ids or []
    for content in (answer, "\n" + answer):  # whatever the template puts between role and content
        scored = client.chat.completions.create(
            model=model,
            messages=[*messages, {"role": "assistant", "content": content}],
            continue_final_message=True,
            add_generation_prompt=False,
            prompt_logprobs=0,
            max_tokens=1,
            return_token_ids=True,
        )
        ids = scored.prompt_token_ids or []
        if ids[: len(head)] == head and len(ids) == len(head) + len(answer.encode()):
            entries = (scored.prompt_logprobs or [])[len(head) :]
            tail = ids[len(head) :]
            return head, tail, [e[str(t)]["logprob"] for e, t in zip(entries, tail, strict=True)]  # type: ignore[index]
    raise AssertionError("cannot place the answer right after the generation prompt")


def answer_logprob(client: tk.Client, model: str, word: str, answer: str) -> float:
    return sum(scored_answer(client, model, word, answer)[2])


def choice(
    prompt_ids: list[int], answer_ids: list[int], logprobs: list[float] | None, content: str
) -> dict[str, Any]:
    """A Choice as ART 0.5.23 sends it (vLLM extras ``prompt_token_ids`` / ``token_ids`` included)."""
    tokens = [*answer_ids, IM_END]
    out: dict[str, Any] = {
        "finish_reason": "stop",
        "index": 0,
        "message": {"content": content, "refusal": None, "role": "assistant", "tool_calls": None},
        "logprobs": None,
        "prompt_token_ids": prompt_ids,
        "token_ids": tokens,
    }
    if logprobs is not None:
        values = [*logprobs, -5.5]
        out["logprobs"] = {
            "content": [
                {"token": f"token_id:{t}", "bytes": None, "logprob": lp, "top_logprobs": []}
                for t, lp in zip(tokens, values, strict=True)
            ],
            "refusal": None,
        }
    return out


def answer_trajectory(
    client: tk.Client, model: str, word: str, answer: str, reward: float, **choice_kw: Any
) -> dict[str, Any]:
    head, ids, lps = scored_answer(client, model, word, answer)
    made = choice(head, ids, lps, answer)
    made.update(choice_kw)
    return {"messages_and_choices": [*prompt(word), made], "reward": reward}


def rewarded_group(client: tk.Client, model: str, copies: int = 1, **choice_kw: Any) -> dict[str, Any]:
    """A group for ``cat``: the answer ``tac`` rewarded 1, ``xyz`` 0, ``copies`` times each."""
    pair = [("tac", 1.0), ("xyz", 0.0)] * copies
    return {"trajectories": [answer_trajectory(client, model, "cat", a, r, **choice_kw) for a, r in pair]}


def job_events(client: tk.Client, job_id: str) -> list[TrainingJobEvent]:
    """Every event of a job (a job of these tests has fewer than 100)."""
    return list(client.training_jobs.events.list(job_id, limit=100))


def wait_job(client: tk.Client, job_id: str, timeout: float = 180.0) -> TrainingJob:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.training_jobs.retrieve(job_id)
        if job.status in TERMINAL:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} did not end")


def wait_for_event(client: tk.Client, job_id: str, kind: str, timeout: float = 120.0) -> None:
    """Until the job has a ``kind`` event (any page); fails at once when it ended without one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.training_jobs.retrieve(job_id).status  # read first: the events then are all
        if any(e.type == kind for e in client.training_jobs.events.list(job_id, limit=100)):
            return
        assert status not in TERMINAL, f"the job ended ({status}) without a {kind} event"
        time.sleep(0.1)
    raise AssertionError(f"no {kind} event")


def long_sft_job(client: tk.Client, model_id: str, seed: int) -> TrainingJobHandle:
    """An SFT job of 3000 batches of one example: it runs for minutes, until cancelled or killed."""
    data = [reverse.conversation(w) for w in reverse.sample_words(3000, seed=seed)]
    return client.sft_training_jobs.create_from_data(
        model_id=model_id, data=data, config={"batch_size": 1, "learning_rate": 1e-6}
    )
