"""Random model folders (``toolkit.server.engine.random_models``) are ordinary Hugging Face folders:
transformers loads the same weights and the tokenizer that renders the chat template as the server
does; the vocabulary matches the byte tokenizer; a seed gives the same weights again."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from toolkit.server.engine.random_models import VOCAB, config, write_folder
from toolkit.server.engine.tokenizer import byte_tokenizer


def test_a_folder_loads_in_transformers_with_its_tokenizer_and_template(tmp_path: Path) -> None:
    built = write_folder(tmp_path / "q", "qwen3", seed=3)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "q").eval()
    ids = torch.tensor([[256, 104, 105, 257]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, built(ids).logits)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "q")
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(rendered["input_ids"]) == text
    assert rendered["input_ids"][:2] == [256, ord("u")]  # ChatML start, then bytes


def test_the_vocabulary_is_the_byte_tokenizers_and_a_seed_repeats(tmp_path: Path) -> None:
    assert byte_tokenizer().get_vocab_size() == VOCAB == config("llama").vocab_size
    one = write_folder(tmp_path / "a", "llama", seed=1)
    again = write_folder(tmp_path / "b", "llama", seed=1)
    other = write_folder(tmp_path / "c", "llama", seed=2)
    first = next(one.parameters())
    assert torch.equal(first, next(again.parameters())) and not torch.equal(first, next(other.parameters()))


def test_a_shape_overrides_the_small_config(tmp_path: Path) -> None:
    built = write_folder(tmp_path / "big", "qwen3", num_hidden_layers=3, intermediate_size=96)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "big")
    for model in (built, loaded):
        c = model.config
        assert (c.num_hidden_layers, c.intermediate_size, c.head_dim, c.hidden_size) == (3, 96, 16, 64)
    assert config("qwen3").num_hidden_layers == 2


def test_an_unknown_architecture_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown architecture 'gpt2'; known: llama, mistral, qwen2, qwen3"):
        config("gpt2")
