"""``prompt_key``: the same prompt gives the same key whatever form its messages take."""

from __future__ import annotations

from toolkit.types import Trajectory, prompt_key

PROMPT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "reverse cat"}]
CHOICE = {"message": {"role": "assistant", "content": "tac"}, "finish_reason": "stop", "index": 0}


def test_the_key_is_of_the_messages_before_the_first_assistant_turn() -> None:
    key = prompt_key(PROMPT)
    assert key is not None and len(key) == 32 and int(key, 16) >= 0
    parsed = Trajectory.model_validate(
        {"messages_and_choices": [*PROMPT, CHOICE, {"role": "user", "content": "x"}]}
    )
    assert prompt_key(parsed.messages_and_choices) == key  # typed items; what follows the answer is ignored
    assert prompt_key([*PROMPT, CHOICE]) == key  # a choice as a dict ends the prompt too
    assert prompt_key([*PROMPT, {"role": "assistant", "content": "tac"}]) == key
    noisy = [{**m, "name": None, "extra": 1} for m in PROMPT]
    assert prompt_key(noisy) == key  # None fields and unknown keys do not count


def test_different_prompts_differ_and_no_prompt_has_no_key() -> None:
    assert prompt_key([{"role": "user", "content": "reverse dog"}]) != prompt_key(PROMPT[1:])
    assert prompt_key(PROMPT[1:]) != prompt_key(PROMPT)
    assert prompt_key([CHOICE]) is None and prompt_key([]) is None
