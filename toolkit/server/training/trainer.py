"""Gradient steps: one RL step over trajectory groups, or an SFT pass over conversations, on a
:class:`~.policy.Policy` (its trainable parameters: the LoRA adapter, or every weight)."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from ...seeding import derive_seed
from ...types.training import TrajectoryGroup
from .config import RLConfig
from .forward import Batch, costs, make_batch, token_logprobs
from .loss import LossInputs, policy_loss
from .policy import Policy
from .sequences import ChatFormat, Sample, UntrainableError, pack, rl_samples
from .step_memory import step_memory

if TYPE_CHECKING:
    from transformers import PreTrainedModel

GRAD_CLIP = 1.0

StepHook = Callable[[dict[str, float]], None]


def _clip_and_step(
    params: Sequence[torch.nn.Parameter], optimizer: torch.optim.Optimizer, lr: float, loss: float, step: int
) -> float:
    """Clip the gradient and take one AdamW step, unless the loss or the gradient is not finite:
    then fail before touching the weights (a NaN would spread to every weight)."""
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP))
    if not (math.isfinite(loss) and math.isfinite(grad_norm)):
        raise UntrainableError(
            f"gradient step {step}: the loss ({loss}) or the gradient norm ({grad_norm}) is not a finite"
            " number, so no weights were changed. Extreme advantages (unscaled rewards far apart, with"
            " scale_rewards off) or extreme values in the data cause this."
        )
    for group in optimizer.param_groups:
        group["lr"] = lr
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm


# ----------------------------------------------------------------------------- RL


@dataclass
class RLPlan:
    batches: list[list[Sample]]
    num_groups: int
    num_groups_trainable: int
    num_trajectories: int
    advantages: list[list[float]]  # per group, per trajectory: the advantage the step uses
    prepare_s: float = 0.0  # seconds spent tokenizing and packing


def pass_seed(seed: int, iteration: int, job_seed: int | None) -> int:
    """The shuffle seed of pass ``iteration``: ``seed + iteration`` (``seed`` is the base step), or
    one derived from the job's seed."""
    return seed + iteration if job_seed is None else derive_seed(job_seed, "minibatches", seed, iteration)


def plan_rl(
    groups: Sequence[TrajectoryGroup],
    cfg: RLConfig,
    fmt: ChatFormat,
    seed: int,
    job_seed: int | None = None,
) -> RLPlan:
    """Tokenize, compute advantages and split into minibatches (one gradient step each), the whole
    set ``num_iterations`` times over, each pass shuffled anew (:func:`pass_seed`)."""
    started = time.perf_counter()
    plan = rl_samples(
        groups,
        fmt,
        scale_rewards=cfg.scale_rewards,
        advantage_balance=cfg.advantage_balance,
        allow_without_logprobs=cfg.allow_training_without_logprobs,
    )
    batches = [
        batch
        for iteration in range(cfg.num_iterations)
        for batch in pack(plan.samples, cfg.packed_sequence_length, pass_seed(seed, iteration, job_seed))
    ]
    return RLPlan(
        batches,
        plan.num_groups,
        plan.num_groups_trainable,
        plan.num_trajectories,
        plan.advantages,
        time.perf_counter() - started,
    )


def _logprobs_without_grad(model: PreTrainedModel, batch: Batch, chunk: int) -> torch.Tensor:
    with torch.no_grad():
        logp, _ = token_logprobs(model, batch, chunk, with_entropy=False)
    return logp


def run_rl(
    policy: Policy,
    plan: RLPlan,
    cfg: RLConfig,
    *,
    pad_id: int,
    lr_multiplier: float,
    reference: PreTrainedModel | None,
    on_step: StepHook,
) -> None:
    """One gradient step per minibatch; ``on_step`` gets each step's metrics (and may raise to stop)."""
    model, params = policy.model, policy.parameters()
    optimizer = policy.optimizer_for("rl")
    chunk = cfg.logprob_calculation_chunk_size
    device, cost = next(model.parameters()).device, costs(model)
    batches = [make_batch(b, pad_id, device, cost) for b in plan.batches]
    model.eval()  # no dropout: the recomputed logprobs must match the sampler's
    started = time.perf_counter()
    sampler: list[torch.Tensor | None] = [None] * len(batches)
    if cfg.precalculate_logprobs:
        for i, batch in enumerate(batches):
            sampler[i] = batch.logprobs
            batch.logprobs = _logprobs_without_grad(model, batch, chunk)
    references = [
        _logprobs_without_grad(reference, b, chunk) if reference is not None else None for b in batches
    ]
    job_timing = {"timing_s/prepare": plan.prepare_s, "timing_s/old_logprobs": time.perf_counter() - started}
    for i, (samples, batch) in enumerate(zip(plan.batches, batches, strict=True)):
        step_start = time.perf_counter()
        with step_memory(model, batch.num_positions):
            new, entropy = token_logprobs(model, batch, chunk)
        out = policy_loss(
            LossInputs(
                new_logprobs=new,
                old_logprobs=batch.logprobs,
                advantages=batch.advantages,
                mask=batch.mask,
                weights=batch.weights,
                sampler_logprobs=sampler[i],
                ref_logprobs=references[i],
                entropy=entropy,
            ),
            cfg,
        )
        out.loss.backward()
        num_trajectories = len({s.trajectory for s in samples})
        lr = step_learning_rate(cfg, num_trajectories, lr_multiplier)
        loss = float(out.loss.detach())
        backward_end = time.perf_counter()
        grad_norm = _clip_and_step(params, optimizer, lr, loss, i + 1)
        step_end = time.perf_counter()
        num_tokens = float(batch.attention.sum())
        on_step(
            {
                "loss": loss,
                "grad_norm": grad_norm,
                "learning_rate": lr,
                "num_trajectories": float(num_trajectories),
                "num_trainable_tokens": float(batch.mask.sum()),
                "num_tokens": num_tokens,
                **out.metrics,
                **job_timing,
                "timing_s/forward_backward": backward_end - step_start,
                "timing_s/optimizer": step_end - backward_end,
                "timing_s/step": step_end - step_start,
                "throughput/tokens_per_s": num_tokens / max(step_end - step_start, 1e-9),
            }
        )


def step_learning_rate(cfg: RLConfig, num_trajectories: int, multiplier: float = 1.0) -> float:
    """``learning_rate * multiplier * n ** num_trajectories_learning_rate_multiplier_power`` for a
    minibatch of n distinct trajectories."""
    power = cfg.num_trajectories_learning_rate_multiplier_power
    return cfg.learning_rate * multiplier * num_trajectories**power


def peak_learning_rate(plan: RLPlan, cfg: RLConfig, multiplier: float) -> float | None:
    """The largest learning rate of the plan's steps (None without steps)."""
    rates = [step_learning_rate(cfg, len({s.trajectory for s in b}), multiplier) for b in plan.batches]
    return max(rates, default=None)


def reward_std_lr_multiplier(history: Sequence[tuple[int, float]]) -> float:
    """``scale_learning_rate_by_reward_std_dev``: fit ``reward_std_dev ~ a + b * step`` over the
    model's history and scale by ``(a + b * last step) / a`` (1 when it cannot be fitted, a <= 0)."""
    if len(history) < 2:
        return 1.0
    xs = [float(s) for s, _ in history]
    # the ratio does not change when every value is divided by the largest: then nothing overflows
    top = max(abs(v) for _, v in history)
    if top == 0 or not math.isfinite(top):
        return 1.0
    ys = [v / top for _, v in history]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var == 0:
        return 1.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var
    intercept = my - slope * mx
    if intercept <= 0:
        return 1.0
    return max(0.0, (intercept + slope * xs[-1]) / intercept)


# ----------------------------------------------------------------------------- SFT


def sft_batches(
    samples: Sequence[Sample], batch_size: int, job_seed: int | None = None, base_step: int = 0
) -> list[list[Sample]]:
    """Batches of ``batch_size`` examples: in file order, or shuffled by the job's seed (and the
    step the job starts from)."""
    order = list(samples)
    if job_seed is not None:
        random.Random(derive_seed(job_seed, "sft", base_step)).shuffle(order)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def run_sft(
    policy: Policy,
    batches: Sequence[Sequence[Sample]],
    learning_rates: Sequence[float],
    *,
    pad_id: int,
    chunk_size: int,
    on_step: StepHook,
) -> None:
    """Next-token cross-entropy on assistant tokens, averaged over the batch's assistant tokens."""
    model, params = policy.model, policy.parameters()
    optimizer = policy.optimizer_for("sft")
    device, cost = next(model.parameters()).device, costs(model)
    model.train()
    try:
        for i, (samples, lr) in enumerate(zip(batches, learning_rates, strict=True)):
            batch = make_batch(samples, pad_id, device, cost)
            with step_memory(model, batch.num_positions):
                logp, entropy = token_logprobs(model, batch, chunk_size)
            count = batch.mask.sum()
            loss = -(logp * batch.mask).sum() / count.clamp(min=1)
            loss.backward()
            grad_norm = _clip_and_step(params, optimizer, lr, float(loss.detach()), i + 1)
            assert entropy is not None
            on_step(
                {
                    "loss": float(loss.detach()),
                    "grad_norm": grad_norm,
                    "learning_rate": lr,
                    "entropy": float((entropy * batch.mask).sum() / count.clamp(min=1)),
                    "num_trajectories": float(len(samples)),
                    "num_trainable_tokens": float(count),
                    "num_tokens": float(batch.attention.sum()),
                }
            )
    finally:
        model.eval()
