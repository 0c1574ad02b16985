"""LoRA training over loopback HTTP on the built-in model: how a model trains is chosen at creation
(``lora_config`` / ``full_finetuning``), each checkpoint is a standard peft adapter folder, RL and
SFT move the served checkpoint, the KL reference may be an adapter, full fine-tuning stays whole
weights."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import BASE, answer_logprob, rewarded_group, served
from toolkit.tasks import reverse
from toolkit.types.training import Model

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ART_DEFAULTS = {"rank": 8, "alpha": 16, "dropout": 0.0, "target_modules": TARGETS, "use_rslora": False}
# (in, out) of the built-in model's linear layers, in each of its 4 blocks
SHAPES = {"q_proj": (128, 128), "k_proj": (128, 128), "v_proj": (128, 128), "o_proj": (128, 128)}
SHAPES |= {"gate_proj": (128, 512), "up_proj": (128, 512), "down_proj": (512, 128)}
PATHS = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn"}
PATHS |= {"gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}


def create(http: Any, name: str, **extra: Any) -> Any:
    return http.post(
        "/v1/preview/models", json={"project": "tests-lora", "name": name, "base_model": BASE, **extra}
    )


def lora_model(client: tk.Client, **settings: Any) -> Model:
    name = f"lora-{uuid.uuid4().hex[:8]}"
    return client.models.create(project="tests-lora", name=name, base_model=BASE, lora_config=settings)


def test_how_a_model_trains_is_chosen_at_creation(server: LocalServer) -> None:
    suffix = uuid.uuid4().hex[:8]
    with server.http() as http:
        builtin = create(http, f"default-{suffix}").json()
        assert (builtin["full_finetuning"], builtin["lora_config"]) == (True, None)  # tiny built-in: full FT
        lora = create(http, f"lora-{suffix}", full_finetuning=False).json()
        assert (lora["full_finetuning"], lora["lora_config"]) == (False, ART_DEFAULTS)
        small = {"rank": 4, "target_modules": ["q_proj"]}
        custom = create(http, f"custom-{suffix}", lora_config=small).json()
        assert custom["lora_config"] == {**ART_DEFAULTS, "rank": 4, "target_modules": ["q_proj"]}
        assert http.get(f"/v1/preview/models/{custom['id']}").json() == custom

        again = create(http, f"custom-{suffix}", return_existing=True)  # no training settings: as it is
        assert again.json() == custom
        other = create(http, f"custom-{suffix}", return_existing=True, lora_config={"rank": 8})
        assert other.status_code == 409
        assert other.json()["detail"].startswith(f"Model local/tests-lora/custom-{suffix} exists and trains")
        assert create(http, f"default-{suffix}", return_existing=True, full_finetuning=True).json() == builtin


@pytest.mark.parametrize(
    ("extra", "loc", "message"),
    [
        (
            {"lora_config": {"target_modules": ["q_proj", "qkv_proj"]}},
            ["body", "lora_config", "target_modules"],
            "qkv_proj: no such linear layer in toolkit/tiny-chat-1m; its layers end in down_proj, gate_proj,"
            " k_proj, o_proj, q_proj, up_proj, v_proj",
        ),
        (
            {"lora_config": {"target_modules": ["lm_head"]}},  # vLLM refuses adapters on the output head
            ["body", "lora_config", "target_modules"],
            "lm_head: no such linear layer in toolkit/tiny-chat-1m; its layers end in down_proj, gate_proj,"
            " k_proj, o_proj, q_proj, up_proj, v_proj",
        ),
        ({"lora_config": {"r": 16}}, ["body", "lora_config", "r"], "Extra inputs are not permitted"),
        (
            {"lora_config": {"rank": 0}},
            ["body", "lora_config", "rank"],
            "Input should be greater than or equal to 1",
        ),
        (
            {"lora_config": {"rank": 4}, "full_finetuning": True},
            ["body"],
            "Value error, give lora_config or full_finetuning: true, not both",
        ),
    ],
)
def test_bad_training_settings_are_a_422_and_create_nothing(
    server: LocalServer, extra: dict[str, Any], loc: list[str], message: str
) -> None:
    name = f"bad-{uuid.uuid4().hex[:8]}"
    with server.http() as http:
        r = create(http, name, **extra)
        assert r.status_code == 422
        (error,) = r.json()["detail"]
        assert (error["loc"], error["msg"]) == (loc, message)
        assert name not in [m["name"] for m in http.get("/v1/preview/models").json()]


def adapter_config(folder: Any) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((folder / "adapter_config.json").read_text())
    return config


def test_sft_writes_a_peft_adapter_and_moves_the_served_checkpoint(server: LocalServer) -> None:
    client = server.client()
    model = lora_model(client, rank=4, alpha=8)
    before = answer_logprob(client, served(model, 0), "cat", "tac")
    job = client.sft_training_jobs.create_from_data(
        model_id=model.id,
        data=[reverse.conversation("cat")] * 32,
        config={"batch_size": 2, "learning_rate": 3e-3},
    )
    assert job.wait(progress=False).step == 1
    assert answer_logprob(client, served(model, 1), "cat", "tac") > before + 1.0
    assert answer_logprob(client, served(model, 0), "cat", "tac") == pytest.approx(before, abs=1e-5)

    folder = server.data_dir / "checkpoints" / model.id / "step1"
    assert sorted(p.name for p in folder.iterdir()) == [
        "README.md",
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    config = adapter_config(folder)
    expected = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": BASE,
        "r": 4,
        "lora_alpha": 8,
        "lora_dropout": 0.0,
        "bias": "none",
        "use_rslora": False,
        "inference_mode": True,
        "modules_to_save": None,
    }
    assert {k: config[k] for k in expected} == expected
    assert sorted(config["target_modules"]) == sorted(TARGETS)
    tensors = load_file(folder / "adapter_model.safetensors")
    names = {
        f"base_model.model.model.layers.{i}.{PATHS[m]}.{m}.lora_{ab}.weight"
        for i in range(4)
        for m in TARGETS
        for ab in "AB"
    }
    assert set(tensors) == names  # peft's names: no adapter name, nothing but the adapter
    for m, (fan_in, fan_out) in SHAPES.items():
        a = tensors[f"base_model.model.model.layers.0.{PATHS[m]}.{m}.lora_A.weight"]
        b = tensors[f"base_model.model.model.layers.0.{PATHS[m]}.{m}.lora_B.weight"]
        assert (tuple(a.shape), tuple(b.shape)) == ((4, fan_in), (fan_out, 4))
        assert bool(b.abs().sum() > 0)  # B starts at zero: training moved it

    listing = server.http().get(f"/v1/preview/models/{model.id}/checkpoints/1/files").json()
    assert (listing["format"], listing["base_model"], listing["step"]) == ("peft-lora", BASE, 1)
    assert [f["name"] for f in listing["files"]] == sorted(p.name for p in folder.iterdir())


def test_rl_on_an_adapter_and_an_adapter_as_kl_reference(server: LocalServer) -> None:
    client = server.client()
    model = lora_model(client, rank=8)
    base = served(model, 0)
    group = rewarded_group(client, base)
    before = {a: answer_logprob(client, base, "cat", a) for a in ("tac", "xyz")}
    config = {"ppo": True, "learning_rate": 1e-2, "packed_sequence_length": 40}
    job = client.training_jobs.create(
        model_id=model.id, trajectory_groups=[group], experimental_config=config
    )
    assert job.wait(progress=False).step == 1
    after = {a: answer_logprob(client, served(model, 1), "cat", a) for a in ("tac", "xyz")}
    # to first order a policy-gradient step widens the gap by |g_tac - g_xyz|^2 >= 0; each alone may
    # move either way on the pre-trained model, whose two answers share the turn's format
    assert after["tac"] - after["xyz"] > before["tac"] - before["xyz"] + 0.1
    assert after["tac"] > before["tac"] + 0.1
    warnings = next(e for e in client.training_jobs.events.list(job.id) if e.type == "training_started")
    assert "LoRA adapter on toolkit/tiny-chat-1m" in warnings.data["warnings"][0]  # 1e-2 > 1e-3
    assert adapter_config(server.data_dir / "checkpoints" / model.id / "step1")["r"] == 8

    # the reference is checkpoint 1 (an adapter); before any step the policy equals it: KL 0
    kl = {**config, "learning_rate": 1e-4, "kl_penalty_coef": 0.5, "kl_penalty_reference_step": 1}
    kl["kl_penalty_source"] = "current_learner"
    again = client.training_jobs.create(model_id=model.id, trajectory_groups=[group], experimental_config=kl)
    assert again.wait(progress=False).step == 2
    first = next(e for e in client.training_jobs.events.list(again.id) if e.type == "gradient_step")
    assert first.data["kl_policy_ref"] == pytest.approx(0.0, abs=1e-4)
    assert again.refresh().status == "succeeded"


def test_full_fine_tuning_keeps_whole_weights(server: LocalServer) -> None:
    client = server.client()
    name = f"full-{uuid.uuid4().hex[:8]}"
    model = client.models.create(project="tests-lora", name=name, base_model=BASE, full_finetuning=True)
    assert (model.full_finetuning, model.lora_config) == (True, None)
    job = client.sft_training_jobs.create_from_data(
        model_id=model.id, data=[reverse.conversation("cat")] * 2, config={"batch_size": 2}
    )
    assert job.wait(progress=False).step == 1
    folder = server.data_dir / "checkpoints" / model.id / "step1"
    assert [p.name for p in folder.iterdir()] == ["model.safetensors"]
    weights = load_file(folder / "model.safetensors")
    assert weights["model.embed_tokens.weight"].shape == torch.Size([260, 128])  # every weight
    listing = server.http().get(f"/v1/preview/models/{model.id}/checkpoints/1/files").json()
    assert listing["format"] == "full"
