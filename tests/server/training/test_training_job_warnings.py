"""The warnings of a job's first event: unknown experimental keys, learning rates far too high."""

from __future__ import annotations

from toolkit.server.engine.model import BUILTIN_NAME
from toolkit.server.training.job_warnings import rl_learning_rate, unknown_keys
from toolkit.types.training import ExperimentalSFTConfig, ExperimentalTrainingConfig


def test_unknown_keys_are_named_once_sorted() -> None:
    cfg = ExperimentalTrainingConfig.model_validate({"zeta": 1, "alpha": None, "ppo": True})
    ignored = "experimental_config keys this server does not know were ignored"
    assert unknown_keys(cfg) == [f"{ignored}: alpha, zeta."]
    assert unknown_keys(ExperimentalTrainingConfig(ppo=True)) == []
    assert unknown_keys(None) == []
    sft = ExperimentalSFTConfig.model_validate({"logprob_calculation_chunk_size": 8, "packing": "on"})
    assert unknown_keys(sft) == [f"{ignored}: packing."]


def test_rl_learning_rate_of_the_built_in_model() -> None:
    """Measured on the built-in model: 1e-4 to 2e-4 stable, 3e-4 and more collapsed it."""
    assert rl_learning_rate(BUILTIN_NAME, 2e-4, lora=False) == []
    (warning,) = rl_learning_rate(BUILTIN_NAME, 3e-4, lora=False)
    assert warning.startswith("The learning rate of this job reaches 0.0003, far above the range known")
    assert warning.endswith("Use 1e-4 to 2e-4.")


def test_rl_learning_rate_of_other_base_models() -> None:
    """Full fine-tuning of any other base model: more than 1e-4 is far above the usual 1e-6 to 1e-5."""
    assert rl_learning_rate("Qwen/Qwen3-0.6B", 1e-4, lora=False) == []
    (warning,) = rl_learning_rate("Qwen/Qwen3-0.6B", 5e-4, lora=False)
    assert "RL with full fine-tuning of Qwen/Qwen3-0.6B" in warning
    assert warning.endswith("Use 1e-6 to 1e-5.")


def test_rl_learning_rate_of_a_lora_adapter() -> None:
    """A LoRA adapter, on any base: about ten times the full fine-tuning rate, so up to 1e-3."""
    assert rl_learning_rate("Qwen/Qwen3-0.6B", 1e-3, lora=True) == []
    assert rl_learning_rate(BUILTIN_NAME, 5e-4, lora=True) == []  # the built-in model's limit is for full FT
    (warning,) = rl_learning_rate("Qwen/Qwen3-0.6B", 2e-3, lora=True)
    assert warning == (
        "The learning rate of this job reaches 0.002, far above the range known to work for RL with a LoRA"
        " adapter on Qwen/Qwen3-0.6B: 1e-6 to 1e-4 is usual (ART's default is 5e-6). Use 1e-6 to 1e-4."
    )
