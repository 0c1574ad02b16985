"""The memory of a gradient step: the loss keeps no logits for its backward pass (a 49,152-token
vocabulary's would be 400 MB here) and runs the output head only before trained tokens, decoder layers
recomputed above the activation budget give the same gradients, a step that cannot fit is refused
with what to lower, and the server's resident memory stays flat from one RL step of the real model to
the next."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import toolkit as tk
from conftest import LocalServer
from toolkit.rollouts import gather, trajectory
from toolkit.server.training import step_memory
from toolkit.server.training.forward import LOGITS_BYTES, make_batch, token_logprobs
from toolkit.server.training.sequences import Sample, UntrainableError
from toolkit.types.training import Trajectory

VOCAB = 49_152  # SmolLM2's


def small_model(layers: int = 1, vocab: int = VOCAB) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config).eval()


def one_batch(tokens: int, vocab: int = VOCAB):  # type: ignore[no-untyped-def]
    ids = [(7 * i + 3) % vocab for i in range(tokens)]
    return make_batch([Sample(tokens=ids, mask=[True] * tokens)], pad_id=0)


def saved_bytes(run: Callable[[], torch.Tensor]) -> tuple[torch.Tensor, int]:
    """``run()`` and the bytes of the tensors autograd saved for its backward pass (outside
    recomputed parts, whose own saving replaces this hook's)."""
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return out, total


def test_the_loss_keeps_no_logits_and_gives_the_plain_logprobs_and_gradients() -> None:
    model = small_model()
    batch = one_batch(2048)
    logp, kept = saved_bytes(lambda: token_logprobs(model, batch, 1024)[0])
    assert kept < LOGITS_BYTES  # the [2047, 49152] float32 logits alone are 400 MB
    (logp * batch.mask).sum().backward()
    chunked = model.model.embed_tokens.weight.grad.clone()
    model.zero_grad()
    logits = model(batch.tokens).logits[:, :-1].float()
    plain = logits.log_softmax(-1).gather(-1, batch.tokens[:, 1:, None])[..., 0]
    assert torch.allclose(logp[:, 1:], plain, atol=1e-5)
    (plain * batch.mask[:, 1:]).sum().backward()
    assert torch.allclose(chunked, model.model.embed_tokens.weight.grad, rtol=1e-4, atol=1e-4)


def test_the_output_head_runs_only_before_trained_tokens_and_gives_their_plain_logprobs() -> None:
    model = small_model(vocab=512)
    ids = [(7 * i + 3) % 512 for i in range(48)]
    # a 40-token prompt and 8 trained tokens; a shorter row (padded) with 12 and 8
    samples = [Sample(ids, [False] * 40 + [True] * 8), Sample(ids[:20], [False] * 12 + [True] * 8)]
    batch = make_batch(samples, pad_id=0)
    rows: list[int] = []
    head = model.get_output_embeddings()
    hook = head.register_forward_hook(lambda _m, args, _o: rows.append(args[0].shape[0]))
    logp, entropy = token_logprobs(model, batch, 1024)
    hook.remove()
    assert sum(rows) == 16 and len(rows) == 1  # the 16 trained positions, as one matrix, not 2 x 47
    plain = model(batch.tokens, attention_mask=batch.attention).logits[:, :-1].float().log_softmax(-1)
    plain = plain.gather(-1, batch.tokens[:, 1:, None])[..., 0]
    trained = batch.mask.bool()
    assert torch.allclose(logp[trained], plain[trained[:, 1:]], atol=1e-5)
    assert entropy is not None and bool((entropy[trained] > 0).all())
    assert not logp[~trained].any() and not entropy[~trained].any()


@pytest.mark.parametrize("lengths", [(512,), (512, 300)], ids=["one sequence", "a padded batch"])
def test_recomputed_layers_give_the_same_gradients_keeping_less(
    monkeypatch: pytest.MonkeyPatch, lengths: tuple[int, ...]
) -> None:
    model = small_model(layers=3, vocab=300)
    # a padded batch has an explicit mask, which a layer's keys appended twice (a KV cache filled again
    # by the recompute) no longer fit; one unpadded sequence hid that (duplicated keys attend alike)
    samples = [Sample(tokens=[(7 * i + n) % 300 for i in range(n)], mask=[True] * n) for n in lengths]
    batch = make_batch(samples, pad_id=0)

    def step(budget: int) -> tuple[list[torch.Tensor], int, bool]:
        monkeypatch.setattr(step_memory, "ACTIVATION_BYTES", budget)
        model.zero_grad()
        with step_memory.step_memory(model, batch.tokens.numel()) as recomputed:
            logp, kept = saved_bytes(lambda: token_logprobs(model, batch, 1024)[0])
        (logp * batch.mask).sum().backward()
        return [p.grad.clone() for p in model.parameters() if p.grad is not None], kept, recomputed

    plain, kept, recomputed = step(1 << 60)
    again, kept_again, recomputed_again = step(0)
    assert not recomputed and recomputed_again
    assert kept_again < kept / 4
    assert all(torch.equal(a, b) for a, b in zip(plain, again, strict=True))
    assert all(type(layer).forward is layer.forward.__func__ for layer in model.model.layers)  # restored


def test_a_step_that_cannot_fit_is_refused_with_what_to_lower(monkeypatch: pytest.MonkeyPatch) -> None:
    model = small_model()
    monkeypatch.setattr(step_memory, "available_memory", lambda: 1 << 20)
    refused = pytest.raises(UntrainableError, match=r"lower packed_sequence_length \(RL\) or batch_size")
    with refused, step_memory.step_memory(model, 100_000):
        pass
    with torch.no_grad(), step_memory.step_memory(model, 100_000) as recomputed:  # no step: no refusal
        assert not recomputed


def test_a_step_that_fits_only_recomputed_is_recomputed_not_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the activation budget, but with less memory left than keeping the activations needs and
    more than recomputing them does: the layers are recomputed (the same gradients) and the job runs."""
    model = small_model()
    kept = step_memory.activation_bytes(model, 1_000)
    assert kept < step_memory.ACTIVATION_BYTES
    for free, recomputes in ((2 * kept, False), (kept, True)):
        monkeypatch.setattr(step_memory, "available_memory", lambda free=free: free)
        with step_memory.step_memory(model, 1_000) as recomputed:
            assert recomputed is recomputes
    monkeypatch.setattr(step_memory, "available_memory", lambda: kept // 2)
    refused = pytest.raises(UntrainableError, match="lower packed_sequence_length")
    with refused, step_memory.step_memory(model, 1_000):  # not even recomputed does it fit
        pass


@pytest.fixture(scope="module")
def real_server(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalServer]:
    """The real model, as ``toolkit serve`` serves it by default."""
    args = ("--base-model", "toolkit/smollm2-135m-instruct")
    server = LocalServer(tmp_path_factory.mktemp("memory"), extra_args=args).start()
    yield server
    server.stop()


def test_the_servers_memory_stays_flat_from_one_rl_step_of_the_real_model_to_the_next(
    real_server: LocalServer,
) -> None:
    client = real_server.client()
    model = client.models.create(project="memory", name="flat", base_model="toolkit/smollm2-135m-instruct")

    def rollout(name: str) -> Callable[[str], Trajectory]:
        def run(word: str) -> Trajectory:
            messages = [{"role": "user", "content": f"Write one word that rhymes with {word}."}]
            completion = client.chat.completions.create(
                model=name,
                messages=messages,
                max_tokens=12,
                temperature=1.0,
                logprobs=True,
                return_token_ids=True,
            )
            return trajectory(
                messages, completion, reward=float(len(completion.choices[0].message.content or ""))
            )

        return run

    rss: list[int] = []
    resident: list[int] = []
    step = 0
    for i in range(7):
        name = tk.research.checkpoint_name(model, step)
        groups = gather(["cat", "sun"], rollout(name), group_size=4, seed=i, progress=False)
        job = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config={"seed": i}
        )
        step = job.wait(progress=False, poll_interval=0.1).step
        rss.append(psutil.Process(real_server.proc.pid).memory_info().rss)  # type: ignore[union-attr]
        (served,) = client.health().models or []
        resident.append(served.adapters)
    assert step == 7
    # each step's adapter retires the one before it (idle once its rollouts ended): one resident, not 7
    assert resident == [0, 1, 1, 1, 1, 1, 1]
    settled = rss[3:]
    assert max(settled) - min(settled) < 48 * 2**20, [r // 2**20 for r in rss]
