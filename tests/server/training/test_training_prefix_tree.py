"""A minibatch runs as one prefix tree: a prefix that several rows share runs once, and every row gets
the logprobs and gradients it gets on its own, on the architectures the server trains (Llama, Qwen3)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

from toolkit.server.engine import random_models
from toolkit.server.engine.model import tiny_config
from toolkit.server.engine.random_models import random_model
from toolkit.server.training import forward
from toolkit.server.training.forward import Tree, make_batch, token_logprobs
from toolkit.server.training.sequences import Sample

PROMPT = [(5 * i + 2) % 97 for i in range(30)]  # a system prompt and a question, shared


def group() -> list[Sample]:
    """A group's episodes: one prompt, different answers; two identical episodes; one that differs from
    the first token on; one that is a prefix of another and trains tokens the other does not."""
    answers = [[11, 12, 13, 14], [11, 12, 40], [50, 51, 52, 53, 54], [50, 51, 52, 53, 54]]
    samples = [Sample(PROMPT + a, [False] * len(PROMPT) + [True] * len(a)) for a in answers]
    samples.append(Sample([3, *PROMPT[1:], 60, 61], [False] * len(PROMPT) + [True, True]))
    samples.append(Sample(PROMPT[:20], [False] * 10 + [True] * 10))
    return samples


def row_by_row(model: PreTrainedModel, samples: list[Sample]) -> list[torch.Tensor]:
    """Each row's logprobs from the model run on that row alone (position t: token t after < t)."""
    out = []
    for s in samples:
        ids = torch.tensor([s.tokens])
        logits = model(ids).logits[0, :-1].float()
        out.append(logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0])
    return out


def test_a_shared_prefix_is_one_run_of_nodes_each_after_its_parent() -> None:
    rows = [s.tokens for s in group()]
    tree = Tree.of(rows, max(map(len, rows)))
    # the prompt once, the answers' own tokens once each (the two equal episodes once), the row
    # that differs from token 0 entirely, and none for the row that is a prefix
    assert len(tree.tokens) == 30 + (4 + 1 + 5) + 32
    assert bool((tree.parents < torch.arange(len(tree.tokens))).all())
    for r, row in enumerate(rows):
        path = tree.nodes[r, : len(row)]
        assert tree.tokens[path].tolist() == row
        assert tree.positions[path].tolist() == list(range(len(row)))
        assert tree.parents[path].tolist() == [-1, *path[:-1].tolist()]
    mask = Tree.attention(tree, torch.float32)[0, 0]
    sees = mask == 0
    assert sees.sum(1).tolist() == (tree.positions + 1).tolist()  # itself and its ancestors, nothing else


@pytest.mark.parametrize("architecture", ["llama", "qwen3"])
def test_every_row_gets_the_logprobs_and_gradients_it_gets_alone(architecture: str) -> None:
    model = random_model(architecture)
    samples = group()
    batch = make_batch(samples, pad_id=0)
    seen: list[int] = []
    hook = model.get_input_embeddings().register_forward_hook(
        lambda _m, args, _o: seen.append(args[0].numel())
    )
    logp, entropy = token_logprobs(model, batch, 1024)
    hook.remove()
    assert batch.tree is not None and seen == [batch.num_positions]
    assert batch.num_positions < batch.attention.sum() / 2
    weights = torch.rand(batch.mask.shape, generator=torch.Generator().manual_seed(1))
    (logp * batch.mask * weights).sum().backward()
    tree_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()

    alone = row_by_row(model, samples)
    total = torch.zeros(())
    for r, (s, plain) in enumerate(zip(samples, alone, strict=True)):
        trained = batch.mask[r, 1 : len(s.tokens)].bool()
        assert torch.allclose(logp[r, 1 : len(s.tokens)][trained], plain[trained], atol=1e-5)
        assert not logp[r][~batch.mask[r].bool()].any()
        total = total + (plain * batch.mask[r, 1 : len(s.tokens)] * weights[r, 1 : len(s.tokens)]).sum()
    total.backward()
    alone_grads = [p.grad for p in model.parameters() if p.grad is not None]
    for tree_grad, alone_grad in zip(tree_grads, alone_grads, strict=True):
        assert torch.allclose(tree_grad, alone_grad, rtol=1e-4, atol=1e-6)
    assert entropy is not None and bool((entropy[batch.mask.bool()] > 0).all())


def test_a_token_trained_in_several_rows_goes_through_the_head_once() -> None:
    model = random_model("llama")
    samples = group()[2:4]  # two equal episodes: 5 trained tokens each, the same 5 nodes
    batch = make_batch(samples, pad_id=0)
    rows: list[int] = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda _m, args, _o: rows.append(args[0].shape[0])
    )
    logp, _ = token_logprobs(model, batch, 1024)
    hook.remove()
    assert rows == [5]
    assert torch.equal(logp[0], logp[1]) and int((logp[0] != 0).sum()) == 5


def test_rows_that_share_nothing_or_too_many_nodes_run_as_their_padded_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No tree where it saves nothing (rows of one length that share no prefix), nor past
    ``TREE_NODES`` (its mask grows as the square of its nodes): the padded rows, with the logprobs
    each row gets alone."""
    model = random_model("llama")
    apart = [
        Sample([1, *PROMPT[1:], 11], [False] * 30 + [True]),
        Sample(list(range(2, 33)), [False] + [True] * 30),
    ]
    monkeypatch.setattr(forward, "TREE_NODES", 40)
    for samples in (apart, group()):  # nothing shared; 72 nodes, past the 40 allowed here
        batch = make_batch(samples, pad_id=0)
        assert batch.tree is None and batch.num_positions == batch.tokens.numel()
        logp, _ = token_logprobs(model, batch, 1024)
        for r, (s, plain) in enumerate(zip(samples, row_by_row(model, samples), strict=True)):
            trained = batch.mask[r, 1 : len(s.tokens)].bool()
            assert torch.allclose(logp[r, 1 : len(s.tokens)][trained], plain[trained], atol=1e-5)


def shared_start(rows: int, shared: int, own: int) -> list[Sample]:
    """``rows`` samples that begin with the same ``shared`` tokens, then ``own`` tokens of their own."""
    start = [(7 * i + 3) % 250 for i in range(shared)]
    return [
        Sample(start + [(r * 31 + t) % 250 for t in range(own)], [False] * shared + [True] * own)
        for r in range(rows)
    ]


def test_a_minibatch_runs_as_a_tree_only_where_the_model_does_less_work_so() -> None:
    """The tree attends over all its nodes at once, each padded row over itself: where attention
    dominates (the built-in 1M model: hidden 128, 4 layers), a batch shaped like its lookup
    demonstrations (16 rows of 187 tokens, 45 shared) runs faster as padded rows (measured: 0.39 s
    against 0.93 s a step); where the weights dominate (SmolLM2's shape: hidden 576, 30 layers), one
    shaped like its lookup episodes (17 rows of 177 tokens, 125 shared) runs faster as a tree."""
    with torch.device("meta"):  # the costs need the shapes only
        tiny = AutoModelForCausalLM.from_config(tiny_config())
        smollm2 = AutoModelForCausalLM.from_config(
            random_models.config("llama", hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                 num_attention_heads=9, num_key_value_heads=3, vocab_size=49152)
        )  # fmt: skip
    for model, samples, tree in (
        (tiny, shared_start(16, 45, 142), False),
        (smollm2, shared_start(17, 125, 52), True),
    ):
        batch = make_batch(samples, pad_id=0, cost=forward.costs(model))
        assert (batch.tree is not None) is tree
        # by default (no costs given), a tree wherever it saves positions, as both of these would
        assert make_batch(samples, pad_id=0).tree is not None


def test_padded_rows_are_priced_at_every_padded_position_not_at_their_tokens() -> None:
    """Rows of unequal lengths run padded to the longest: nine short rows beside a long one cost ten
    long rows, so even with no shared prefix the tree (no padding) does less work."""
    long = Sample([(3 * t + 1) % 250 for t in range(100)], [True] * 100)
    short = [Sample([(r * 31 + t) % 250 for t in range(10)], [True] * 10) for r in range(1, 10)]
    tree = Tree.of([s.tokens for s in [long, *short]], 100)
    assert len(tree.tokens) == 190  # nothing shared: the tree packs the rows
    assert make_batch([long, *short], pad_id=0).tree is not None  # 190 positions against 1,000
    assert make_batch([long, long], pad_id=0).tree is not None  # all shared: 100 against 200
    assert make_batch([long, Sample([9, *long.tokens[1:]], long.mask)], pad_id=0).tree is None  # 200 = 200
