"""The engine's own forward equals transformers' for each architecture it serves (Llama, Mistral,
Qwen2 with q/k/v biases, Qwen3 with q/k norms and tied embeddings), prefill and decode, loaded from
a folder as the server loads it; the KV shape read from config.json alone (at start-up, before any
model is loaded) is checked against the loaded model's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from support.model_folders import ARCHITECTURES, write_folder
from toolkit.server.engine.device import pick_placement
from toolkit.server.engine.kv_pool import KVPool, KVShape
from toolkit.server.engine.model import from_folder, kv_shape, load_model
from toolkit.server.engine.runner import Runner
from toolkit.server.engine.sources import BaseModelError
from toolkit.server.engine.weights import WeightsPool

PROMPT = [256, 117, 115, 101, 114, 10, 104, 105, 257, 10, 256, 97, 115]
NEXT = [65, 66, 67, 68]  # the decode steps' tokens


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_runner_matches_transformers(arch: str, tmp_path: Path) -> None:
    reference_model = write_folder(tmp_path, arch)
    spec = from_folder(tmp_path)
    runner = Runner(load_model(spec), spec.max_model_len)
    with torch.no_grad():
        reference = reference_model(torch.tensor([[*PROMPT, *NEXT]])).logits[0]
    pool = KVPool(runner.kv_shape, runner.device, 1 << 22)
    table: list[int] = []
    assert pool.grow(table, len(PROMPT))
    last, [full] = runner.prefill(pool, [table], [PROMPT], [0], [True])
    assert full is not None and torch.allclose(runner.logits(full), reference[: len(PROMPT)], atol=1e-4)
    assert torch.allclose(last[0], reference[len(PROMPT) - 1], atol=1e-4)
    for step, token in enumerate(NEXT[:-1]):
        at = len(PROMPT) + step
        assert pool.writable(table, at)
        logits = runner.decode(pool, [table], [token], [at])
        assert torch.allclose(logits[0], reference[at], atol=1e-4), (arch, step)


def test_architecture_details_are_present(tmp_path: Path) -> None:
    """The configs exercise what differs between the architectures (else the test above proves less)."""
    qwen2 = write_folder(tmp_path / "qwen2", "qwen2")
    qwen3 = write_folder(tmp_path / "qwen3", "qwen3")
    attention2 = qwen2.model.layers[0].self_attn  # type: ignore[union-attr,index]
    attention3 = qwen3.model.layers[0].self_attn  # type: ignore[union-attr,index]
    assert attention2.q_proj.bias is not None and attention2.q_proj.bias.abs().sum() > 0
    assert hasattr(attention3, "q_norm") and attention3.head_dim == 16
    assert qwen3.lm_head.weight.data_ptr() == qwen3.model.embed_tokens.weight.data_ptr()  # type: ignore[union-attr]
    spec = from_folder(tmp_path / "qwen3")
    loaded = load_model(spec)
    assert torch.equal(loaded.lm_head.weight, qwen3.model.embed_tokens.weight)  # type: ignore[union-attr]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_the_kv_shape_of_config_json_is_the_loaded_models(arch: str, tmp_path: Path) -> None:
    write_folder(tmp_path, arch, num_attention_heads=2, num_key_value_heads=1)
    spec = from_folder(tmp_path)
    runner = WeightsPool(spec, pick_placement("cpu"), 1 << 20).base
    assert runner.kv_shape == kv_shape(spec, torch.float32)


def test_a_config_json_that_reads_as_another_kv_shape_fails_the_load_in_one_line(tmp_path: Path) -> None:
    """Qwen3's head_dim defaults to 128, not hidden_size // heads: a config.json without it would size
    the KV cache wrongly, so loading the base says so instead of failing a decode step."""
    write_folder(tmp_path, "qwen3", head_dim=128)  # hidden_size 64 over 4 heads
    config = json.loads((tmp_path / "config.json").read_text())
    del config["head_dim"]  # the model is the same without it
    (tmp_path / "config.json").write_text(json.dumps(config))
    spec = from_folder(tmp_path)
    assert kv_shape(spec, torch.float32) == KVShape(2, 2, 16, torch.float32)
    with pytest.raises(BaseModelError, match=r"head_dim=128.*its config\.json reads as .*head_dim=16.*give"):
        _ = WeightsPool(spec, pick_placement("cpu"), 1 << 20).base
