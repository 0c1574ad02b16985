"""The RL objective of spec/training-api.md section 4, as pure functions over tensors.

Shapes: per-token tensors are ``[batch, length]``; position ``t`` holds what concerns token ``t``
(its log-probability given the tokens before it). ``mask`` is 1 on trained assistant tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .config import RLConfig

LOG_RATIO_CLAMP = 20.0


def group_advantages(rewards: Sequence[float], scale_rewards: bool) -> list[float]:
    """``R - mean(R)``, divided by ``std_pop(R) + 1e-6`` when ``scale_rewards``; all 0 if no variance.

    Computed on the rewards divided by their largest magnitude ``s`` (the same values, since
    ``(R - m) / (std + 1e-6) = (R/s - m/s) / (std/s + 1e-6/s)``), so that extreme finite rewards
    (``1e308``, ``-2.8e160``) never overflow: scaled advantages are always finite. Unscaled ones
    are ``R - mean(R)`` and may exceed the float range (``inf``)."""
    if not rewards or max(rewards) == min(rewards):
        return [0.0] * len(rewards)
    scale = max(abs(r) for r in rewards)
    scaled = [r / scale for r in rewards]
    mean = sum(scaled) / len(scaled)
    centred = [r - mean for r in scaled]
    if not scale_rewards:
        return [c * scale for c in centred]
    std = math.sqrt(sum(c * c for c in centred) / len(centred))
    return [c / (std + 1e-6 / scale) for c in centred]


def token_weights(num_tokens: Sequence[int]) -> list[float]:
    """One weight per trajectory, ``1 / its assistant tokens``, scaled so the mean over tokens is 1."""
    total, count = sum(num_tokens), len(num_tokens)
    return [total / (count * n) if n else 0.0 for n in num_tokens]


def balance_advantages(
    advantages: Sequence[float], num_tokens: Sequence[int], weights: Sequence[float], balance: float
) -> list[float]:
    """``advantage_balance``: shrink negative (b > 0) or positive (b < 0) advantages by ``1 - |b|``,
    then rescale so that ``mean(|A| * w)`` over assistant tokens is 1. ``b = 0`` changes nothing."""
    if balance == 0 or not advantages:
        return list(advantages)
    out = [
        a * (1 - balance) if balance > 0 and a < 0 else a * (1 + balance) if balance < 0 and a > 0 else a
        for a in advantages
    ]
    total = sum(num_tokens)  # each term is at most abs(a): the sum cannot overflow
    scale = sum(abs(a) * (w * n / total) for a, w, n in zip(out, weights, num_tokens, strict=True))
    return [a / scale for a in out] if scale > 0 else out


@dataclass
class LossInputs:
    new_logprobs: torch.Tensor  # requires grad
    old_logprobs: torch.Tensor  # logπ_old; NaN where unknown (then taken as sg(logπ_new))
    advantages: torch.Tensor
    mask: torch.Tensor
    weights: torch.Tensor
    sampler_logprobs: torch.Tensor | None = None  # the sampler's, when old ones were recomputed
    ref_logprobs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None


@dataclass
class LossOutput:
    loss: torch.Tensor
    metrics: dict[str, float]


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / (mask.sum() + 1e-6)


def policy_loss(x: LossInputs, cfg: RLConfig) -> LossOutput:
    """The clipped policy-gradient loss (PPO or CISPO) with every shaping term of the config."""
    mask = x.mask.to(x.new_logprobs.dtype)
    new = x.new_logprobs
    old = torch.where(torch.isnan(x.old_logprobs), new.detach(), x.old_logprobs)
    log_diff = torch.clamp(new - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    advantages = x.advantages
    metrics: dict[str, float] = {}

    if cfg.kimi_k2_tau:
        advantages = advantages - cfg.kimi_k2_tau * log_diff.detach()
    if cfg.kl_penalty_coef > 0 and x.ref_logprobs is not None:
        if cfg.kl_penalty_source == "sample":
            sampled = x.sampler_logprobs if x.sampler_logprobs is not None else x.old_logprobs
            source = torch.where(torch.isnan(sampled), new.detach(), sampled)
        else:
            source = new.detach()
        kl = (source - x.ref_logprobs).detach()
        mean_kl = _masked_mean(kl, mask)
        advantages = advantages + cfg.kl_penalty_coef * (mean_kl - kl)
        metrics["kl_policy_ref"] = float(mean_kl)
    if x.ref_logprobs is not None:
        metrics["kl"] = float(_masked_mean(k3_kl(new.detach(), x.ref_logprobs), mask))

    token_ratio = torch.exp(log_diff)
    ratio = token_ratio
    if cfg.importance_sampling_level != "token":
        seq_log = (log_diff * mask).sum(dim=1, keepdim=True) / (mask.sum(dim=1, keepdim=True) + 1e-6)
        seq_ratio = torch.exp(seq_log).expand_as(token_ratio)
        if cfg.importance_sampling_level == "sequence":
            ratio = seq_ratio
        elif cfg.importance_sampling_level == "average":
            ratio = (token_ratio + seq_ratio) / 2
        else:
            ratio = torch.sqrt(token_ratio * seq_ratio)
    if cfg.max_negative_advantage_importance_sampling_weight is not None:
        ratio = torch.clamp(ratio, max=cfg.max_negative_advantage_importance_sampling_weight)
    low, high = 1 - cfg.epsilon, 1 + cfg.epsilon_high
    measured = ratio.detach()  # the metrics read the ratio before mask_prob_ratio zeroes it
    outside = ((measured <= low) | (measured >= high)).to(mask.dtype)
    if cfg.mask_prob_ratio:
        ratio = torch.where((ratio > low) & (ratio < high), ratio, torch.zeros_like(ratio))

    if cfg.ppo:
        loss = -torch.min(ratio * advantages, torch.clamp(ratio, low, high) * advantages)
    else:
        loss = -(torch.clamp(ratio.detach(), low, high) * advantages * new)
    if cfg.truncated_importance_sampling is not None and x.sampler_logprobs is not None:
        sampled = torch.where(torch.isnan(x.sampler_logprobs), old, x.sampler_logprobs)
        loss = loss * torch.clamp(torch.exp(old - sampled), max=cfg.truncated_importance_sampling).detach()

    total = (loss * x.weights * mask).sum() / (mask.sum() + 1e-6)
    selected = measured[mask.bool()]
    metrics["loss/importance_ratio_mean"] = float(selected.mean()) if selected.numel() else 1.0
    metrics["loss/clipped_token_fraction"] = float(_masked_mean(outside, mask))
    metrics |= clip_ratios(measured, advantages.detach(), mask, low, high)
    if x.entropy is not None:
        metrics["entropy"] = float(_masked_mean(x.entropy, mask))
    return LossOutput(total, metrics)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """TRL's per-token KL estimate to the reference: ``exp(r) - r - 1`` with ``r = ref - logp`` (>= 0)."""
    r = torch.clamp(ref_logprobs - logprobs, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.exp(r) - r - 1


def clip_ratios(
    ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, low: float, high: float
) -> dict[str, float]:
    """TRL's ``clip_ratio/*``: the share of trained tokens whose ratio is below ``low`` with a negative
    advantage, above ``high`` with a positive one, or either (the tokens the clip acts on).

    TRL's ``low_min`` and ``high_max`` are the smallest and largest of those shares over its
    data-parallel processes; a gradient step here is one minibatch in one process, so they equal
    ``low_mean`` and ``high_mean`` (a checkpoint takes their min and max over the job's steps)."""
    below = ((ratio < low) & (advantages < 0)).to(mask.dtype)
    above = ((ratio > high) & (advantages > 0)).to(mask.dtype)
    low_share = float(_masked_mean(below, mask))
    high_share = float(_masked_mean(above, mask))
    return {
        "clip_ratio/low_mean": low_share,
        "clip_ratio/low_min": low_share,
        "clip_ratio/high_mean": high_share,
        "clip_ratio/high_max": high_share,
        "clip_ratio/region_mean": float(_masked_mean(torch.maximum(below, above), mask)),
    }
