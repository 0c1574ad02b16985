"""The official ``openai`` package pointed at the local server, as users of vLLM would use it."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from conftest import LocalServer

USER = [{"role": "user", "content": "Hello!"}]


@pytest.fixture(scope="module")
def client(server: LocalServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key=server.key, max_retries=0) as c:
        yield c


def test_create_reads_content_usage_and_logprobs(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="toolkit/tiny-chat-1m",
        messages=USER,  # type: ignore[arg-type]
        max_tokens=5,
        logprobs=True,
        top_logprobs=3,
        seed=4,
        extra_body={"return_token_ids": True, "ignore_eos": True},
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "length" and isinstance(choice.message.content, str)
    assert completion.usage is not None and completion.usage.completion_tokens == 5
    assert choice.logprobs is not None and choice.logprobs.content is not None
    assert len(choice.logprobs.content) == 5 and all(
        len(t.top_logprobs) == 3 for t in choice.logprobs.content
    )
    assert len(completion.prompt_token_ids) == completion.usage.prompt_tokens  # type: ignore[attr-defined]


def test_stream_equals_create(client: openai.OpenAI) -> None:
    kwargs = {"model": "toolkit/tiny-chat-1m", "messages": USER, "max_tokens": 12, "seed": 9}
    whole = client.chat.completions.create(**kwargs)  # type: ignore[call-overload]
    stream = client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs)  # type: ignore[call-overload]
    chunks = list(stream)
    assert (
        "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        == whole.choices[0].message.content
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == whole.usage.total_tokens


def test_errors_map_to_openai_exceptions(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="toolkit/tiny-chat-1m", messages=USER, temperature=5)  # type: ignore[arg-type]
    assert "temperature must be in [0, 2]" in bad.value.message
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="no-such-model", messages=USER)  # type: ignore[arg-type]
    with pytest.raises(openai.APIError, match="greater than max allowed"):
        list(
            client.chat.completions.create(
                model="toolkit/tiny-chat-1m",
                messages=USER,  # type: ignore[arg-type]
                stream=True,
                logprobs=True,
                top_logprobs=25,
            )
        )
