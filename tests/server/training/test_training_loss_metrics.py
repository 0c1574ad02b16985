"""The RL health metrics of the loss (TRL's ``clip_ratio/*``, ``kl``, ``entropy``) against values
computed here independently: plain-Python counts of hand-chosen ratios and advantages, the exact KL
of two small distributions, and ``torch.distributions``' entropy of the model's full logits."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch
from transformers import LlamaForCausalLM

from toolkit.server.engine.model import tiny_config
from toolkit.server.training.config import RLConfig
from toolkit.server.training.forward import make_batch, token_logprobs
from toolkit.server.training.job_metrics import over_steps
from toolkit.server.training.loss import LossInputs, clip_ratios, k3_kl, policy_loss
from toolkit.server.training.sequences import Sample

PPO = RLConfig(ppo=True, epsilon=0.2, epsilon_high=0.3)  # band [0.8, 1.3]
# (ratio, advantage, trained): every case of TRL's definitions, and one untrained token that would count
TOKENS = [
    (0.5, -1.0, True),  # low: below the band, negative advantage
    (0.7, -2.0, True),  # low
    (0.5, 1.0, True),  # below the band with a positive advantage: the clip does not act
    (1.5, 1.0, True),  # high: above the band, positive advantage
    (1.5, -1.0, True),  # above the band with a negative advantage: no
    (1.0, 1.0, True),  # inside
    (0.6, 0.0, True),  # no advantage: neither
    (2.0, 1.0, False),  # not trained: never counts
]


def shares(low: float, high: float) -> dict[str, float]:
    """TRL's fractions over the trained tokens, counted in plain Python."""
    trained = [(r, a) for r, a, m in TOKENS if m]
    is_low = [r < low and a < 0 for r, a in trained]
    is_high = [r > high and a > 0 for r, a in trained]
    n = len(trained)
    return {
        "low": sum(is_low) / n,
        "high": sum(is_high) / n,
        "region": sum(lo or hi for lo, hi in zip(is_low, is_high, strict=True)) / n,
    }


def loss_inputs(**extra: torch.Tensor) -> LossInputs:
    new = torch.full((1, len(TOKENS)), math.log(0.25), requires_grad=True)
    return LossInputs(
        new_logprobs=new,
        old_logprobs=torch.tensor([[math.log(0.25) - math.log(r) for r, _, _ in TOKENS]]),
        advantages=torch.tensor([[a for _, a, _ in TOKENS]]),
        mask=torch.tensor([[float(m) for _, _, m in TOKENS]]),
        weights=torch.ones(1, len(TOKENS)),
        **extra,
    )


def test_clip_ratios_follow_trls_definitions() -> None:
    expected = shares(0.8, 1.3)
    assert expected == {"low": 2 / 7, "high": 1 / 7, "region": 3 / 7}
    x = loss_inputs()
    ratio = torch.exp(x.new_logprobs.detach() - x.old_logprobs)
    got = clip_ratios(ratio, x.advantages, x.mask, 0.8, 1.3)
    for side in ("low", "high", "region"):
        assert got[f"clip_ratio/{side}_mean"] == pytest.approx(expected[side], rel=1e-5)
    assert got["clip_ratio/low_min"] == got["clip_ratio/low_mean"]  # one process per step
    assert got["clip_ratio/high_max"] == got["clip_ratio/high_mean"]
    metrics = policy_loss(x, PPO).metrics  # the same through the loss, with its band
    assert {k: v for k, v in metrics.items() if k.startswith("clip_ratio/")} == got


def test_mask_prob_ratio_leaves_the_clip_metrics_as_measured() -> None:
    """The ratios outside the band are zeroed for the loss only: without the fix they all read as
    "low" (0 < 1 - epsilon) and never "high"."""
    plain = policy_loss(loss_inputs(), PPO).metrics
    masked = policy_loss(loss_inputs(), replace(PPO, mask_prob_ratio=True)).metrics
    assert masked == pytest.approx(plain, rel=1e-6)
    assert masked["clip_ratio/high_mean"] == pytest.approx(1 / 7, rel=1e-5)
    assert masked["clip_ratio/low_mean"] == pytest.approx(2 / 7, rel=1e-5)
    trained_ratios = [r for r, _, m in TOKENS if m]
    assert masked["loss/importance_ratio_mean"] == pytest.approx(sum(trained_ratios) / 7, rel=1e-5)


def test_k3_kl_is_an_unbiased_estimate_of_the_exact_kl() -> None:
    """Weighted by the policy's own probabilities, k3 of every token sums to KL(p || ref) exactly."""
    p = [0.5, 0.3, 0.15, 0.05]
    ref = [0.25, 0.25, 0.25, 0.25]
    exact = sum(pi * math.log(pi / qi) for pi, qi in zip(p, ref, strict=True))
    k3 = k3_kl(torch.tensor(p).log().double(), torch.tensor(ref).log().double())
    assert float((torch.tensor(p).double() * k3).sum()) == pytest.approx(exact, rel=1e-6)
    assert exact > 0.1 and bool((k3 >= 0).all())


def test_the_kl_metric_is_the_masked_mean_of_k3() -> None:
    ref = [math.log(0.1 + 0.1 * i) for i in range(len(TOKENS))]
    x = loss_inputs(ref_logprobs=torch.tensor([ref]))
    logp = math.log(0.25)
    by_hand = [math.exp(q - logp) - (q - logp) - 1 for q, (_, _, m) in zip(ref, TOKENS, strict=True) if m]
    kl = policy_loss(x, PPO).metrics["kl"]
    assert kl == pytest.approx(sum(by_hand) / len(by_hand), rel=1e-5)
    assert kl > 0.01


def test_entropy_equals_torchs_categorical_entropy_of_the_full_logits() -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_config()).eval()
    samples = [Sample(list(range(40, 52)), [False] * 4 + [True] * 8), Sample([7, 8, 9, 10, 11], [True] * 5)]
    batch = make_batch(samples, 259)
    with torch.no_grad():
        _, entropy = token_logprobs(model, batch, 4)
        logits = model(input_ids=batch.tokens, attention_mask=batch.attention).logits
    assert entropy is not None
    reference = torch.distributions.Categorical(logits=logits[:, :-1].double()).entropy()
    trained = batch.mask[:, 1:].bool()  # computed only where a token is trained; 0 before the others
    assert torch.allclose(entropy[:, 1:][trained].double(), reference[trained], atol=1e-4)
    assert float(reference[trained].min()) > 1.0  # a random model: far from certain
    assert not entropy[:, 1:][~trained].any() and int(trained.sum()) == 12
    new = torch.zeros_like(batch.mask, requires_grad=True)
    x = LossInputs(
        new_logprobs=new,
        old_logprobs=torch.zeros_like(batch.mask),
        advantages=torch.ones_like(batch.mask),
        mask=batch.mask,
        weights=torch.ones_like(batch.mask),
        entropy=entropy,
    )
    trained = batch.mask[:, 1:].bool()
    expected = float(reference[trained].mean())
    assert policy_loss(x, PPO).metrics["entropy"] == pytest.approx(expected, rel=1e-4)


def test_a_checkpoint_keeps_the_extremes_of_the_min_and_max_keys() -> None:
    steps = [
        {"clip_ratio/low_min": 0.25, "clip_ratio/high_max": 0.0, "clip_ratio/low_mean": 0.25},
        {"clip_ratio/low_min": 0.05, "clip_ratio/high_max": 0.4, "clip_ratio/low_mean": 0.05},
    ]
    assert over_steps(steps) == pytest.approx(
        {"clip_ratio/high_max": 0.4, "clip_ratio/low_mean": 0.15, "clip_ratio/low_min": 0.05}
    )
