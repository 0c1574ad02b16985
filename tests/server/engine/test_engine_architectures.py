"""The engine's own forward equals transformers' for each architecture it serves (Llama, Mistral,
Qwen2 with q/k/v biases, Qwen3 with q/k norms and tied embeddings), prefill and decode, loaded from
a folder as the server loads it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from support.model_folders import ARCHITECTURES, write_folder
from toolkit.server.engine.kv_pool import KVPool
from toolkit.server.engine.model import from_folder, load_model
from toolkit.server.engine.runner import Runner

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
