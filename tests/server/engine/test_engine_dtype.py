"""``toolkit serve --dtype``: the served weights (and the KV cache) in the dtype asked for, while
training keeps the device's own; an unknown dtype is refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import LocalServer
from toolkit.server.engine.device import DeviceError, pick_placement


def test_a_dtype_is_taken_as_asked_and_an_unknown_one_refused() -> None:
    assert pick_placement("cpu").dtype == torch.float32
    assert pick_placement("cpu", "bfloat16").dtype == torch.bfloat16
    with pytest.raises(DeviceError, match="unknown dtype 'int4'"):
        pick_placement("cpu", "int4")


def test_served_weights_in_bfloat16_train_in_float32(tmp_path: Path) -> None:
    (tmp_path / "bf16").mkdir()
    server = LocalServer(tmp_path / "bf16", extra_args=("--dtype", "bfloat16")).start()
    try:
        http = server.http()
        body = {"model": "toolkit/tiny-chat-1m", "messages": [{"role": "user", "content": "hello"}]}
        answer = http.post("/v1/chat/completions", json={**body, "temperature": 0, "max_tokens": 8})
        assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
        base = http.get("/v1/health").json()["models"][0]
        assert base["dtype"] == "bfloat16" and base["loaded"]
        assert base["parameter_bytes"] < 3_000_000  # two bytes a parameter (float32: 4.4 MB)
        client = server.client()
        model = client.models.create(project="dtype", name="m", base_model="toolkit/tiny-chat-1m")
        demos = [
            {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}]}
        ] * 4
        step = (
            client.sft_training_jobs.create_from_data(model_id=model.id, data=demos).wait(progress=False).step
        )
        assert client.models.checkpoints.record(model.id, step).dtype == "float32"
    finally:
        server.stop()
    refused = subprocess.run(
        [sys.executable, "-m", "toolkit", "serve", "--data-dir", str(tmp_path / "no"), "--dtype", "int4"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2 and "invalid choice: 'int4'" in refused.stderr
