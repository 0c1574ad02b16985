"""The experimental RL config with every default filled in (an explicit null means the default).

Defaults follow ART's local loss (spec: training-api.md section 4): CISPO with clip bounds
[1 - 1.0, 1 + 4.0] unless ``ppo`` (or ``loss_fn="ppo"``), then PPO with epsilon 0.2 on both sides.
A seeded job (``seed`` set) recomputes its old logprobs (``precalculate_logprobs`` unless given):
the sampler's differ in their last bits with the batch each request shared, so a seeded run twice
would train two different checkpoints from the same tokens (docs/training.md, "What is bit for bit").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...types.training import ExperimentalTrainingConfig

RL_LEARNING_RATE = 5e-6
SFT_LEARNING_RATE = 5e-5
PACKED_SEQUENCE_LENGTH = 1024
LOGPROB_CHUNK_SIZE = 1024
SFT_AUTO_BATCH_SIZE = 16

ImportanceSampling = Literal["token", "sequence", "average", "geometric_average"]


@dataclass(frozen=True)
class RLConfig:
    ppo: bool = False
    epsilon: float = 1.0
    epsilon_high: float = 4.0
    scale_rewards: bool = True
    advantage_balance: float = 0.0
    importance_sampling_level: ImportanceSampling = "token"
    mask_prob_ratio: bool = False
    max_negative_advantage_importance_sampling_weight: float | None = None
    kimi_k2_tau: float | None = None
    kl_penalty_coef: float = 0.0
    kl_penalty_source: Literal["sample", "current_learner"] = "current_learner"
    precalculate_logprobs: bool = False
    truncated_importance_sampling: float | None = None
    allow_training_without_logprobs: bool = False
    learning_rate: float = RL_LEARNING_RATE
    num_trajectories_learning_rate_multiplier_power: float = 0.0
    scale_learning_rate_by_reward_std_dev: bool = False
    logprob_calculation_chunk_size: int = LOGPROB_CHUNK_SIZE
    packed_sequence_length: int = PACKED_SEQUENCE_LENGTH
    num_iterations: int = 1


def resolve(cfg: ExperimentalTrainingConfig | None) -> RLConfig:
    """Fill in the defaults. ``epsilon_high`` absent takes the loss default; present but null, epsilon."""
    cfg = cfg or ExperimentalTrainingConfig()
    ppo = bool(cfg.ppo) or cfg.loss_fn == "ppo"
    epsilon = cfg.epsilon if cfg.epsilon is not None else (0.2 if ppo else 1.0)
    if "epsilon_high" not in cfg.model_fields_set:
        epsilon_high = epsilon if ppo else 4.0
    else:
        epsilon_high = cfg.epsilon_high if cfg.epsilon_high is not None else epsilon
    kl_coef = cfg.kl_penalty_coef or 0.0
    scale = cfg.scale_rewards if cfg.scale_rewards is not None else cfg.normalize_advantages
    return RLConfig(
        ppo=ppo,
        epsilon=epsilon,
        epsilon_high=epsilon_high,
        scale_rewards=True if scale is None else scale,
        advantage_balance=cfg.advantage_balance or 0.0,
        importance_sampling_level=cfg.importance_sampling_level or "token",
        mask_prob_ratio=bool(cfg.mask_prob_ratio),
        max_negative_advantage_importance_sampling_weight=cfg.max_negative_advantage_importance_sampling_weight,
        kimi_k2_tau=cfg.kimi_k2_tau or None,
        kl_penalty_coef=kl_coef,
        kl_penalty_source=cfg.kl_penalty_source or ("sample" if kl_coef > 0 else "current_learner"),
        precalculate_logprobs=cfg.seed is not None
        if cfg.precalculate_logprobs is None
        else cfg.precalculate_logprobs,
        truncated_importance_sampling=cfg.truncated_importance_sampling,
        allow_training_without_logprobs=bool(cfg.allow_training_without_logprobs),
        learning_rate=cfg.learning_rate or RL_LEARNING_RATE,
        num_trajectories_learning_rate_multiplier_power=cfg.num_trajectories_learning_rate_multiplier_power
        or 0.0,
        scale_learning_rate_by_reward_std_dev=bool(cfg.scale_learning_rate_by_reward_std_dev),
        logprob_calculation_chunk_size=cfg.logprob_calculation_chunk_size or LOGPROB_CHUNK_SIZE,
        packed_sequence_length=cfg.packed_sequence_length or PACKED_SEQUENCE_LENGTH,
        num_iterations=cfg.num_iterations or 1,
    )
