"""Payloads exactly as ART sends them (spec: training-api.md), shared by the tests."""

# The experimental_config of ART 0.5.23 (POST /v1/preview/training-jobs): all 25 keys, explicit nulls.
ART_0_5_23_CONFIG = {
    "advantage_balance": 0.0,
    "allow_training_without_logprobs": False,
    "epsilon": None,
    "epsilon_high": None,
    "importance_sampling_level": "token",
    "kimi_k2_tau": None,
    "kl_penalty_coef": 0.0,
    "kl_penalty_reference_step": None,
    "kl_penalty_source": "current_learner",
    "kl_penalty_step_lag": None,
    "kl_ref_adapter_path": None,
    "learning_rate": 1e-05,
    "logprob_calculation_chunk_size": 1024,
    "loss_fn": "cispo",
    "mask_prob_ratio": False,
    "max_negative_advantage_importance_sampling_weight": None,
    "normalize_advantages": True,
    "num_trajectories_learning_rate_multiplier_power": 0.0,
    "packed_sequence_length": None,
    "plot_tensors": False,
    "ppo": False,
    "precalculate_logprobs": False,
    "scale_learning_rate_by_reward_std_dev": False,
    "scale_rewards": True,
    "truncated_importance_sampling": None,
}

# ART 0.5.23 train_sft(): one train.jsonl line per trajectory, {"messages": trajectory.messages(),
# "tools": [...] (only when there are tools)}; a Choice becomes an assistant message, content "" if null.
ART_0_5_23_TRAIN_LINES = [
    {
        "messages": [
            {"role": "user", "content": "find x"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "function": {"arguments": '{"q": "x"}', "name": "search"},
                        "type": "function",
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "result"},
            {"role": "assistant", "content": "done"},
        ],
        "tools": [
            {
                "function": {
                    "name": "search",
                    "description": "Search",
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
                },
                "type": "function",
            }
        ],
    },
    {"messages": [{"role": "user", "content": "reverse cat"}, {"role": "assistant", "content": "tac"}]},
]


def art_0_5_23_sft_job(model_id: str, training_data_url: str, target_step: int) -> dict[str, object]:
    """The body of POST /v1/preview/sft-training-jobs as train_sft(config=TrainSFTConfig(batch_size=2))
    sends it (metric logging on: the server is asked to log under the next step)."""
    return {
        "model_id": model_id,
        "training_data_url": training_data_url,
        "config": {
            "batch_size": 2,
            "learning_rate": 5e-05,
            "assistant_turns": "all",
            "metric_logging": {"enabled": True, "target_training_step": target_step},
        },
    }
