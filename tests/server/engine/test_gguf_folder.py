"""The conversion of the built-in SmolLM2's GGUF file (``toolkit.server.engine.gguf_folder``), as
the session's fetch left it in the model cache: a float32 folder without the GGUF's quantization
config, the tied output head stored once, its tools template rendering conversations without tools
exactly as SmolLM2's own template does, and greedy completions equal to those of the GGUF file
loaded by ``transformers``."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch
from gguf import GGUFReader
from transformers import AutoModelForCausalLM, AutoTokenizer

from toolkit.server.engine.fetched import SMOLLM2, STAMP, download_wheel
from toolkit.server.engine.template import render_chat

PROMPTS = ["What is the capital of France?", "Write a haiku about rain."]
CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye."},
    ],
]


@pytest.fixture(scope="module")
def gguf(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The GGUF file of the wheel the session's fetch kept."""
    with zipfile.ZipFile(download_wheel(SMOLLM2, smollm2.parent)) as wheel:
        return Path(wheel.extract(SMOLLM2.member, tmp_path_factory.mktemp("gguf")))


def test_the_folder_is_float32_with_its_stamp_and_the_tools_template(smollm2: Path) -> None:
    assert sorted(p.name for p in smollm2.iterdir()) == [
        "chat_template.jinja",
        "config.json",
        STAMP,
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    stamp = json.loads((smollm2 / STAMP).read_text())
    assert (stamp["package"], stamp["wheel_sha256"], stamp["gguf_sha256"]) == (
        SMOLLM2.requirement,
        SMOLLM2.wheel_sha256,
        SMOLLM2.member_sha256,
    )
    config = json.loads((smollm2 / "config.json").read_text())
    assert "quantization_config" not in config
    assert (config["dtype"], config["tie_word_embeddings"], config["vocab_size"]) == ("float32", True, 49152)
    assert 530e6 < (smollm2 / "model.safetensors").stat().st_size < 540e6  # 134.5M float32, the head once
    assert (smollm2 / "chat_template.jinja").read_text() == SMOLLM2.chat_template()


def test_without_tools_the_template_renders_as_smollm2s_own(gguf: Path) -> None:
    field = GGUFReader(gguf).fields["tokenizer.chat_template"]
    own = bytes(field.parts[field.data[0]]).decode()
    for messages in CONVERSATIONS:
        for prompt in (True, False):
            ours, theirs = (
                render_chat(template, messages, add_generation_prompt=prompt, continue_final_message=False)
                for template in (SMOLLM2.chat_template(), own)
            )
            assert ours == theirs


def test_the_converted_folder_completes_as_the_gguf(smollm2: Path, gguf: Path) -> None:
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    converted = AutoModelForCausalLM.from_pretrained(smollm2)
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    for question in PROMPTS:
        messages = [{"role": "user", "content": question}]
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt = torch.tensor([tokenizer(text, add_special_tokens=False).input_ids])
        with torch.no_grad():
            ref, out = (
                model.eval().generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=2)[0]
                for model in (reference, converted)
            )
        assert out.tolist() == ref.tolist(), question
        if question == PROMPTS[0]:
            assert tokenizer.decode(out[prompt.shape[1] :]).startswith("The capital of France is Paris.")
