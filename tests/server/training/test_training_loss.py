"""Unit tests of the RL loss terms (spec/training-api.md section 4) against hand-computed values.

Each test builds one row of assistant tokens whose importance ratios r = exp(logp_new - logp_old)
are chosen by hand, and compares the loss with the formula of the spec evaluated in plain Python.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from toolkit.server.training.config import RLConfig, resolve
from toolkit.server.training.forward import make_batch, token_logprobs
from toolkit.server.training.loss import (
    LossInputs,
    balance_advantages,
    group_advantages,
    policy_loss,
    token_weights,
)
from toolkit.server.training.runner import reference_step
from toolkit.server.training.sequences import Sample, UntrainableError, pack
from toolkit.server.training.trainer import _clip_and_step, reward_std_lr_multiplier, step_learning_rate
from toolkit.types.training import ExperimentalTrainingConfig

NEW = math.log(0.25)  # logp_new of every token
RATIOS = [0.5, 1.0, 2.0, 6.0]
CISPO = RLConfig()
PPO = RLConfig(ppo=True, epsilon=0.2, epsilon_high=0.2)


def inputs(ratios=RATIOS, advantage=1.0, new=None, **extra) -> LossInputs:
    new_values = new if new is not None else [NEW] * len(ratios)
    new_t = torch.tensor([new_values], requires_grad=True)
    old = torch.tensor([[n - math.log(r) for n, r in zip(new_values, ratios, strict=True)]])
    n = len(ratios)
    base = dict(
        new_logprobs=new_t,
        old_logprobs=old,
        advantages=torch.full((1, n), advantage),
        mask=torch.ones(1, n),
        weights=torch.ones(1, n),
    )
    return LossInputs(**{**base, **extra})


def loss_of(x: LossInputs, cfg: RLConfig) -> float:
    return float(policy_loss(x, cfg).loss.detach())


def mean(values: list[float]) -> float:
    return sum(values) / (len(values) + 1e-6)


def clip(v: float, low: float, high: float) -> float:
    return min(max(v, low), high)


# ----------------------------------------------------------------------------- config defaults


def test_defaults_and_explicit_nulls() -> None:
    cispo = resolve(None)
    assert (cispo.ppo, cispo.epsilon, cispo.epsilon_high, cispo.learning_rate) == (False, 1.0, 4.0, 5e-6)
    assert cispo.scale_rewards and cispo.importance_sampling_level == "token"
    nulls = ExperimentalTrainingConfig.model_validate(
        {k: None for k in ExperimentalTrainingConfig.model_fields if k != "epsilon_high"}
    )
    assert resolve(nulls) == cispo
    ppo = resolve(ExperimentalTrainingConfig(ppo=True))
    assert (ppo.epsilon, ppo.epsilon_high) == (0.2, 0.2)
    assert resolve(ExperimentalTrainingConfig(loss_fn="ppo")).ppo
    # epsilon_high present but null takes epsilon, for either loss
    assert resolve(ExperimentalTrainingConfig(epsilon=0.3, epsilon_high=None)).epsilon_high == 0.3
    assert resolve(ExperimentalTrainingConfig(ppo=True, epsilon=0.1)).epsilon_high == 0.1
    assert resolve(ExperimentalTrainingConfig(epsilon=0.3)).epsilon_high == 4.0
    assert not resolve(ExperimentalTrainingConfig(normalize_advantages=False)).scale_rewards
    assert resolve(ExperimentalTrainingConfig(kl_penalty_coef=0.1)).kl_penalty_source == "sample"


def test_unknown_keys_are_kept_apart_and_wrong_types_rejected() -> None:
    cfg = ExperimentalTrainingConfig.model_validate({"epsilon": 0.3, "epsilonn": 0.2, "future": {"a": 1}})
    assert cfg.model_extra == {"epsilonn": 0.2, "future": {"a": 1}}
    assert resolve(cfg) == resolve(ExperimentalTrainingConfig(epsilon=0.3))  # unknown keys change nothing
    with pytest.raises(ValueError, match="epsilon"):
        ExperimentalTrainingConfig.model_validate({"epsilon": "wide"})
    with pytest.raises(ValueError):
        ExperimentalTrainingConfig(kl_penalty_step_lag=1, kl_penalty_reference_step=0)


# ----------------------------------------------------------------------------- advantages and weights


def test_group_advantages_scale_rewards_and_zero_variance() -> None:
    assert group_advantages([1, 0, 0, 1], scale_rewards=False) == [0.5, -0.5, -0.5, 0.5]
    unit = 0.5 / (0.5 + 1e-6)  # (R - mean) / (std_pop + 1e-6)
    assert group_advantages([1, 0, 0, 1], scale_rewards=True) == pytest.approx([unit, -unit, -unit, unit])
    assert group_advantages([0.7, 0.7, 0.7], scale_rewards=True) == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("rewards", "expected"),
    [
        ([-2.8e160, 1.1], [-1.0, 1.0]),
        ([1e308, -1e308], [1.0, -1.0]),
        ([1e308, 1e308, -1e308], [0.5**0.5] * 2 + [-(2**0.5)]),
    ],
)
def test_group_advantages_of_extreme_finite_rewards(rewards: list[float], expected: list[float]) -> None:
    """Scaled advantages of rewards whose squares overflow are the same finite values as for small ones."""
    assert group_advantages(rewards, scale_rewards=True) == pytest.approx(expected, rel=1e-9)


def test_unscaled_advantages_beyond_the_float_range_are_not_trained() -> None:
    advantages = group_advantages([1.7e308, -1.7e308, 1.7e308], scale_rewards=False)
    assert not all(math.isfinite(a) for a in advantages)  # reward - mean does not fit in a float
    assert group_advantages([1e308, -1e308], scale_rewards=False) == [1e308, -1e308]


def test_token_weights_average_one_over_tokens() -> None:
    weights = token_weights([1, 3])
    assert weights == pytest.approx([2.0, 2 / 3])
    assert (1 * weights[0] + 3 * weights[1]) / 4 == pytest.approx(1.0)


def test_advantage_balance() -> None:
    weights = token_weights([2, 2])
    assert balance_advantages([1, -1], [2, 2], weights, 0.0) == [1, -1]
    # b > 0 shrinks negatives: [1, -0.5]; mean(|A| w) over tokens = 0.75, so divide by 0.75
    assert balance_advantages([1, -1], [2, 2], weights, 0.5) == pytest.approx([4 / 3, -2 / 3])
    # b < 0 shrinks positives: [0.5, -1]
    assert balance_advantages([1, -1], [2, 2], weights, -0.5) == pytest.approx([2 / 3, -4 / 3])
    # huge unscaled advantages: the same values, scaled (mean(|A| w) would overflow if summed plainly)
    assert balance_advantages([1e308, -1e308], [2, 2], weights, 0.5) == pytest.approx([4 / 3, -2 / 3])


# ----------------------------------------------------------------------------- the losses


def test_cispo_default_clip_0_to_5() -> None:
    expected = mean([-clip(r, 0.0, 5.0) * 1.0 * NEW for r in RATIOS])
    assert loss_of(inputs(), CISPO) == pytest.approx(expected, rel=1e-5)
    # the gradient flows through logp_new only, scaled by the clipped (detached) ratio
    x = inputs()
    policy_loss(x, CISPO).loss.backward()
    assert x.new_logprobs.grad is not None
    assert x.new_logprobs.grad[0].tolist() == pytest.approx([-clip(r, 0, 5) / 4 for r in RATIOS], rel=1e-5)


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_ppo_clipped_surrogate(advantage: float) -> None:
    expected = mean([-min(r * advantage, clip(r, 0.8, 1.2) * advantage) for r in RATIOS])
    assert loss_of(inputs(advantage=advantage), PPO) == pytest.approx(expected, rel=1e-5)
    assert loss_of(inputs(advantage=1.0), PPO) == pytest.approx(-3.9 / 4, rel=1e-5)


def test_epsilon_and_epsilon_high() -> None:
    cfg = replace(PPO, epsilon=0.1, epsilon_high=0.5)
    expected = mean([-min(r, clip(r, 0.9, 1.5)) for r in RATIOS])
    assert loss_of(inputs(), cfg) == pytest.approx(expected, rel=1e-5)
    cispo = replace(CISPO, epsilon=0.4, epsilon_high=0.6)
    expected = mean([-clip(r, 0.6, 1.6) * NEW for r in RATIOS])
    assert loss_of(inputs(), cispo) == pytest.approx(expected, rel=1e-5)


def test_clipped_fraction_and_ratio_metrics() -> None:
    metrics = policy_loss(inputs(), PPO).metrics
    assert metrics["loss/clipped_token_fraction"] == pytest.approx(3 / 4, rel=1e-5)
    assert metrics["loss/importance_ratio_mean"] == pytest.approx(sum(RATIOS) / 4, rel=1e-5)


@pytest.mark.parametrize(
    ("level", "ratio_of"),
    [
        ("sequence", lambda r, s: s),
        ("average", lambda r, s: (r + s) / 2),
        ("geometric_average", lambda r, s: math.sqrt(r * s)),
    ],
)
def test_importance_sampling_level(level: str, ratio_of) -> None:
    ratios = [0.5, 3.0]
    seq = math.exp(sum(math.log(r) for r in ratios) / 2)
    cfg = replace(PPO, importance_sampling_level=level)
    expected = mean([-min(ratio_of(r, seq), clip(ratio_of(r, seq), 0.8, 1.2)) for r in ratios])
    assert loss_of(inputs(ratios), cfg) == pytest.approx(expected, rel=1e-5)


def test_max_negative_advantage_importance_sampling_weight_caps_every_ratio() -> None:
    cfg = replace(CISPO, max_negative_advantage_importance_sampling_weight=1.5)
    expected = mean([-min(r, 1.5) * NEW for r in RATIOS])
    assert loss_of(inputs(), cfg) == pytest.approx(expected, rel=1e-5)


def test_mask_prob_ratio_zeroes_ratios_outside_the_bounds() -> None:
    cfg = replace(PPO, mask_prob_ratio=True)
    masked = [r if 0.8 < r < 1.2 else 0.0 for r in RATIOS]
    expected = mean([-min(r, clip(r, 0.8, 1.2)) for r in masked])
    assert loss_of(inputs(), cfg) == pytest.approx(expected, rel=1e-5)
    assert expected == pytest.approx(-0.25, rel=1e-5)


def test_kimi_k2_tau_shifts_the_advantage() -> None:
    cfg = replace(CISPO, kimi_k2_tau=0.5)
    expected = mean([-clip(r, 0, 5) * (1.0 - 0.5 * math.log(r)) * NEW for r in RATIOS])
    assert loss_of(inputs(), cfg) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("source", ["current_learner", "sample"])
def test_kl_penalty_shapes_the_advantage(source: str) -> None:
    new = [math.log(0.5), math.log(0.25)]
    ref = [math.log(0.25), math.log(0.25)]
    ratios = [1.0, 2.0]
    old = [n - math.log(r) for n, r in zip(new, ratios, strict=True)]
    src = new if source == "current_learner" else old
    kl = [s - r for s, r in zip(src, ref, strict=True)]
    kl_mean = sum(kl) / (2 + 1e-6)
    advantages = [1.0 + 0.1 * (kl_mean - k) for k in kl]
    cfg = replace(CISPO, kl_penalty_coef=0.1, kl_penalty_source=source)
    out = policy_loss(inputs(ratios, new=new, ref_logprobs=torch.tensor([ref])), cfg)
    expected = mean([-clip(r, 0, 5) * a * n for r, a, n in zip(ratios, advantages, new, strict=True)])
    assert float(out.loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert out.metrics["kl_policy_ref"] == pytest.approx(kl_mean, rel=1e-5)


def test_truncated_importance_sampling_needs_recomputed_logprobs() -> None:
    cfg = replace(CISPO, truncated_importance_sampling=2.0)
    ratios = [1.0, 1.0]
    plain = mean([-1.0 * NEW] * 2)
    assert loss_of(inputs(ratios), cfg) == pytest.approx(plain, rel=1e-5)  # no sampler logprobs: skipped
    # logπ_old - logπ_sampler = ln 3 on the first token (factor min(3, 2)), -ln 2 on the second (0.5)
    sampler = torch.tensor([[NEW - math.log(3), NEW + math.log(2)]])
    expected = mean([-NEW * 2.0, -NEW * 0.5])
    assert loss_of(inputs(ratios, sampler_logprobs=sampler), cfg) == pytest.approx(expected, rel=1e-5)


def test_missing_old_logprobs_mean_ratio_one() -> None:
    x = inputs([1.0, 1.0], advantage=-1.0)
    x.old_logprobs = torch.full((1, 2), float("nan"))
    assert loss_of(x, replace(PPO)) == pytest.approx(mean([1.0, 1.0]), rel=1e-5)
    assert loss_of(x, CISPO) == pytest.approx(mean([NEW, NEW]), rel=1e-5)


def test_loss_reduction_uses_weights_and_mask() -> None:
    x = inputs([1.0, 1.0, 1.0], mask=torch.tensor([[1.0, 1.0, 0.0]]), weights=torch.tensor([[2.0, 0.5, 9.0]]))
    expected = (-NEW * 2.0 - NEW * 0.5) / (2 + 1e-6)
    assert loss_of(x, CISPO) == pytest.approx(expected, rel=1e-5)


# ----------------------------------------------------------------------------- learning rate, packing


def test_learning_rate_and_num_trajectories_power() -> None:
    cfg = RLConfig(learning_rate=1e-4, num_trajectories_learning_rate_multiplier_power=0.5)
    assert step_learning_rate(cfg, 16) == pytest.approx(1e-4 * 4)
    assert step_learning_rate(RLConfig(learning_rate=1e-4), 16, multiplier=0.5) == pytest.approx(5e-5)


def test_scale_learning_rate_by_reward_std_dev() -> None:
    # std 1.0 at step 1, 0.5 at step 2: line 1.5 - 0.5 step, intercept 1.5, value at step 2 is 0.5
    assert reward_std_lr_multiplier([(1, 1.0), (2, 0.5)]) == pytest.approx(0.5 / 1.5)
    assert reward_std_lr_multiplier([(1, 1.0)]) == 1.0
    assert reward_std_lr_multiplier([(1, 0.0), (2, 1.0)]) == 1.0  # intercept <= 0
    # the same line at any scale: extreme reward spreads never overflow into a NaN learning rate
    assert reward_std_lr_multiplier([(1, 1e308), (2, 5e307)]) == pytest.approx(0.5 / 1.5)


def test_a_non_finite_gradient_fails_the_step_before_the_weights_change() -> None:
    model = torch.nn.Linear(2, 1)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = (model(torch.ones(1, 2)) * 1e38).sum() * 1e38  # inf in float32
    loss.backward()
    with pytest.raises(UntrainableError, match=r"gradient step 3: the loss .* is not a finite number"):
        _clip_and_step(list(model.parameters()), optimizer, 1e-3, float(loss.detach()), 3)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_packed_sequence_length_fills_minibatches() -> None:
    samples = [Sample([1] * n, [False] + [True] * (n - 1), trajectory=i) for i, n in enumerate([4, 4, 4, 9])]
    batches = pack(samples, 8, seed=0)
    assert len(batches) == 3  # two samples of 4 share a minibatch; the long one is cut to 8 tokens
    assert sorted(sum(len(s.tokens) for s in b) for b in batches) == [4, 8, 8]
    assert sorted(len(s.tokens) for b in batches for s in b) == [4, 4, 4, 8]


def test_logprob_calculation_chunk_size_does_not_change_values() -> None:
    from transformers import LlamaForCausalLM

    from toolkit.server.engine.model import tiny_config

    torch.manual_seed(0)
    model = LlamaForCausalLM(tiny_config()).eval()
    batch = make_batch([Sample(list(range(10, 30)), [True] * 20), Sample(list(range(5)), [True] * 5)], 259)
    with torch.no_grad():
        whole, ent_whole = token_logprobs(model, batch, 1024)
        chunked, ent_chunked = token_logprobs(model, batch, 3)
    assert torch.allclose(whole, chunked, atol=1e-5)
    assert ent_whole is not None and ent_chunked is not None
    assert torch.allclose(ent_whole, ent_chunked, atol=1e-5)
    assert float(batch.mask[:, 0].sum()) == 0  # the first token has no context: never trained


def test_kl_reference_checkpoint() -> None:
    def ref(**kw: object) -> int | None:
        return reference_step(ExperimentalTrainingConfig.model_validate(kw), base_step=5)

    assert ref() is None and ref(kl_penalty_coef=0.0, kl_penalty_reference_step=2) is None
    assert ref(kl_penalty_coef=0.1) == 0  # the base weights
    assert ref(kl_penalty_coef=0.1, kl_penalty_reference_step=2) == 2
    assert ref(kl_penalty_coef=0.1, kl_penalty_step_lag=2) == 4  # two steps before the one produced (6)
    assert ref(kl_penalty_coef=0.1, kl_penalty_step_lag=99) == 0
    assert ref(kl_penalty_coef=0.1, kl_ref_adapter_path="/ckpts/model/step3") == 3
    with pytest.raises(ValueError, match="step<N>"):
        ref(kl_penalty_coef=0.1, kl_ref_adapter_path="/somewhere/else")
