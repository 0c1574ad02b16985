"""Synthetic chat data the built-in model (``toolkit/tiny-chat-1m``) is pre-trained on.

Conversations in the OpenAI message shape, each with its tools (or none): greetings and small talk,
short facts, text skills (repeat, spell, upper case, count, reverse longer words) and two-turn tool use
(call a tool with an argument copied from the question, then answer from the tool's result). The
shipped tasks' exact forms (``reverse`` of three letters, ``code`` lookup with ``get``) are left out, so
they remain something to learn with SFT and RL; their skills (copying, reversing, calling a tool and
reading its result) are in.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable
from typing import Any

Conversation = tuple[list[dict[str, Any]], list[dict[str, Any]] | None]

GREETINGS = {
    ("hi", "hello", "hey", "hi there", "hello!", "hey there", "good morning", "good evening"): (
        "Hello! How can I help you today?",
        "Hi! What can I do for you?",
        "Hello there! Ask me anything.",
        "Hi! I am a tiny chat model. How can I help?",
    ),
    ("how are you?", "how are you", "how is it going?", "are you ok?"): (
        "I am fine, thank you! How can I help?",
        "I am doing well. What can I do for you?",
    ),
    ("who are you?", "what are you?", "what is your name?", "who made you?"): (
        "I am tiny-chat, a small language model of the toolkit.",
        "I am a tiny chat model trained on a laptop. You can fine-tune me with RL or SFT.",
    ),
    ("what can you do?", "help", "what do you know?", "can you help me?"): (
        "I can chat, repeat and spell words, and call tools. Train me to do more!",
        "I can answer short questions and call tools. Fine-tune me for your task.",
    ),
    ("thanks", "thank you", "thanks!", "great, thanks"): (
        "You are welcome!",
        "Happy to help!",
        "Any time!",
    ),
    ("bye", "goodbye", "see you", "good night"): ("Goodbye! Have a nice day.", "Bye! See you soon."),
}
COLORS = {
    "sky": "blue",
    "grass": "green",
    "snow": "white",
    "night": "black",
    "sun": "yellow",
    "blood": "red",
    "an orange": "orange",
    "a banana": "yellow",
    "coal": "black",
    "milk": "white",
}
SOUNDS = {"dog": "woof", "cat": "meow", "cow": "moo", "duck": "quack", "sheep": "baa", "owl": "hoot"}
OPPOSITES = {
    "hot": "cold",
    "big": "small",
    "up": "down",
    "fast": "slow",
    "day": "night",
    "old": "new",
    "yes": "no",
    "open": "closed",
    "light": "dark",
    "happy": "sad",
}
CAPITALS = {
    "France": "Paris",
    "Japan": "Tokyo",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Germany": "Berlin",
    "Egypt": "Cairo",
    "Peru": "Lima",
    "Kenya": "Nairobi",
    "Canada": "Ottawa",
    "Norway": "Oslo",
}
CITIES = [*CAPITALS.values(), "London", "Lagos", "Delhi", "Seoul", "Sydney", "Boston", "Quito"]
NAMES = ["ana", "bob", "eve", "li", "omar", "sam", "zoe", "raj", "kim", "max", "ida", "tom"]
WEATHER = ["sunny", "rainy", "cloudy", "windy", "snowy", "foggy"]


def random_word(rng: random.Random, low: int, high: int) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(low, high)))


def _chat(question: str, answer: str) -> Conversation:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}], None


def greeting(rng: random.Random) -> Conversation:
    questions, answers = rng.choice(list(GREETINGS.items()))
    return _chat(rng.choice(questions), rng.choice(answers))


def fact(rng: random.Random) -> Conversation:
    kind = rng.randrange(4)
    if kind == 0:
        thing, color = rng.choice(list(COLORS.items()))
        return _chat(f"what color is {thing}?", f"{thing[0].upper()}{thing[1:]} is {color}.")
    if kind == 1:
        animal, sound = rng.choice(list(SOUNDS.items()))
        return _chat(f"what does a {animal} say?", f"A {animal} says {sound}.")
    if kind == 2:
        word, opposite = rng.choice(list(OPPOSITES.items()))
        if rng.random() < 0.5:
            word, opposite = opposite, word
        return _chat(f"opposite of {word}", opposite)
    country, capital = rng.choice(list(CAPITALS.items()))
    return _chat(f"capital of {country}?", f"The capital of {country} is {capital}.")


def text_skill(rng: random.Random) -> Conversation:
    word = random_word(rng, 3, 8)
    kind = rng.randrange(6)
    if kind == 0:
        return _chat(f"repeat {word}", word)
    if kind == 1:
        return _chat(f"say {word} twice", f"{word} {word}")
    if kind == 2:
        return _chat(f"spell {word}", " ".join(word))
    if kind == 3:
        return _chat(f"upper case {word}", word.upper())
    if kind == 4:
        return _chat(f"how many letters in {word}?", str(len(word)))
    word = random_word(rng, 4, 7)  # three-letter reversal is the shipped task, left to learn
    return _chat(f"reverse the word {word}", word[::-1])


def _function(function: str, **params: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": function,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": t} for p, t in params.items()},
                "required": list(params),
            },
        },
    }


TOOLS = {
    "weather": _function("weather", city="string"),
    "clock": _function("clock", city="string"),
    "add": _function("add", a="integer", b="integer"),
    "phone": _function("phone", name="string"),
    "age": _function("age", name="string"),
    "pin": _function("pin", user="string"),
}


def tool_exchange(
    tool: str, question: str, arguments: dict[str, Any], result: str, call_id: str = "call_0"
) -> list[dict[str, Any]]:
    """The question, the assistant's call of ``tool`` and the tool's result (the answer comes next)."""
    call = {"id": call_id, "type": "function", "function": {"name": tool, "arguments": json.dumps(arguments)}}
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": result},
    ]


def _tool_use(
    rng: random.Random, tool: str, question: str, arguments: dict[str, Any], result: str, answer: str
) -> Conversation:
    call_id = f"call_{rng.randrange(10**6)}"
    others = [t for t in TOOLS if t != tool]
    listed = [TOOLS[tool], *(TOOLS[t] for t in rng.sample(others, rng.randint(0, 2)))]
    rng.shuffle(listed)
    exchange = tool_exchange(tool, question, arguments, result, call_id)
    return [*exchange, {"role": "assistant", "content": answer}], listed


def tool_use(rng: random.Random) -> Conversation:
    kind = rng.randrange(6)
    if kind == 0:
        city, sky, degrees = rng.choice(CITIES), rng.choice(WEATHER), rng.randint(-5, 35)
        return _tool_use(
            rng, "weather", f"weather in {city}?", {"city": city}, f"{sky}, {degrees} C",
            f"It is {sky} and {degrees} C in {city}.",
        )  # fmt: skip
    if kind == 1:
        city, time = rng.choice(CITIES), f"{rng.randrange(24):02d}:{rng.randrange(60):02d}"
        return _tool_use(rng, "clock", f"time in {city}", {"city": city}, time, f"It is {time} in {city}.")
    if kind == 2:
        a, b = rng.randrange(100), rng.randrange(100)
        return _tool_use(rng, "add", f"add {a} and {b}", {"a": a, "b": b}, str(a + b), str(a + b))
    name = rng.choice(NAMES) if rng.random() < 0.5 else random_word(rng, 2, 5)
    if kind == 3:
        number = f"555-{rng.randrange(10000):04d}"
        return _tool_use(rng, "phone", f"phone of {name}", {"name": name}, number, number)
    if kind == 4:
        years = str(rng.randint(1, 99))
        return _tool_use(rng, "age", f"how old is {name}?", {"name": name}, years, f"{name} is {years}.")
    pin = f"{rng.randrange(10000):04d}"
    return _tool_use(rng, "pin", f"pin {name}", {"user": name}, pin, pin)


def chat_with_unused_tools(rng: random.Random) -> Conversation:
    """Tools are listed but the question needs none: the model answers in words."""
    messages, _ = rng.choice([greeting, fact])(rng)
    return messages, [TOOLS[t] for t in rng.sample(list(TOOLS), rng.randint(1, 3))]


def two_exchanges(rng: random.Random) -> Conversation:
    """A second question after a first answer (multi-turn chat without tools)."""
    first, _ = rng.choice([greeting, fact, text_skill])(rng)
    second, _ = rng.choice([fact, text_skill])(rng)
    return [*first, *second], None


KINDS: list[tuple[float, Callable[[random.Random], Conversation]]] = [
    (0.15, greeting),
    (0.15, fact),
    (0.25, text_skill),
    (0.30, tool_use),
    (0.07, chat_with_unused_tools),
    (0.08, two_exchanges),
]


def conversation(rng: random.Random) -> Conversation:
    weights, makers = zip(*KINDS, strict=True)
    return rng.choices(makers, weights=weights)[0](rng)
