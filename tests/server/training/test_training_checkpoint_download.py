"""Checkpoint download (an extension): on a small random Qwen3 served with ``--base-model``, an SFT
job writes a LoRA checkpoint; ``client.models.checkpoints.download`` (sync and async) writes the
peft folder, and ``peft.PeftModel.from_pretrained(base, folder)`` completes greedily exactly as the
local server does for that checkpoint."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import prompt, served
from toolkit.client import NotFoundError
from toolkit.server.engine.random_models import write_folder
from toolkit.tasks import reverse
from toolkit.types.training import Model

WORD, ANSWER = "cat", "tac"


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random Qwen3-shaped causal LM folder over the byte tokenizer, as a Hugging Face folder."""
    folder = tmp_path_factory.mktemp("hf") / "tiny-qwen3"
    write_folder(folder, "qwen3")
    return folder


@pytest.fixture(scope="module")
def qwen3_server(tmp_path_factory: pytest.TempPathFactory, qwen3: Path) -> Iterator[LocalServer]:
    srv = LocalServer(tmp_path_factory.mktemp("qwen3"), extra_args=("--base-model", str(qwen3))).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def trained(qwen3_server: LocalServer) -> Model:
    """A LoRA model (the default for a base other than the built-in one) after one SFT job."""
    with qwen3_server.client() as client:
        model = client.models.create(project="download", name="sft", base_model="tiny-qwen3")
        data = [reverse.conversation(WORD)] * 16
        job = client.sft_training_jobs.create_from_data(
            model_id=model.id, data=data, config={"batch_size": 2, "learning_rate": 1e-2}
        )
        assert job.wait(progress=False).step == 1
        return model


def greedy(client: tk.Client, model: str) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) of a greedy completion by the local server."""
    out = client.chat.completions.create(
        model=model, messages=prompt(WORD), max_tokens=6, temperature=0.0, return_token_ids=True
    )
    assert out.prompt_token_ids is not None and out.choices[0].token_ids is not None
    return out.prompt_token_ids, out.choices[0].token_ids


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def test_a_downloaded_adapter_completes_in_peft_as_on_the_server(
    qwen3_server: LocalServer, qwen3: Path, trained: Model, tmp_path: Path
) -> None:
    with qwen3_server.client() as client:
        assert (trained.full_finetuning, trained.lora_config and trained.lora_config.rank) == (False, 8)
        folder = client.models.checkpoints.download(trained.id, 1, tmp_path / "adapter")
        prompt_ids, served_ids = greedy(client, served(trained, 1))
        _, base_ids = greedy(client, served(trained, 0))
    assert folder == tmp_path / "adapter"
    on_server = qwen3_server.data_dir / "checkpoints" / trained.id / "step1"
    assert digests(folder) == digests(on_server)
    config = json.loads((folder / "adapter_config.json").read_text())
    assert (config["peft_type"], config["base_model_name_or_path"], config["r"]) == ("LORA", "tiny-qwen3", 8)

    base = AutoModelForCausalLM.from_pretrained(qwen3)
    adapted = PeftModel.from_pretrained(base, folder).eval()
    with torch.no_grad():
        out = adapted.generate(
            torch.tensor([prompt_ids]),
            max_new_tokens=6,
            do_sample=False,
            eos_token_id=base.config.eos_token_id,  # the folder's own, as the server reads them
            pad_token_id=base.config.pad_token_id,
        )
    assert out[0, len(prompt_ids) :].tolist() == served_ids
    assert served_ids != base_ids  # the adapter changed the completion: the comparison means something
    assert bytes(served_ids[: len(ANSWER)]) == ANSWER.encode()


def test_the_async_client_downloads_the_same_files(
    qwen3_server: LocalServer, trained: Model, tmp_path: Path
) -> None:
    async def download() -> Path:
        async with qwen3_server.async_client() as client:
            return await client.models.checkpoints.download(trained.id, 1, tmp_path / "async")

    folder = asyncio.run(download())
    assert digests(folder) == digests(qwen3_server.data_dir / "checkpoints" / trained.id / "step1")


def test_what_cannot_be_downloaded_says_why_and_writes_nothing(
    qwen3_server: LocalServer, trained: Model, tmp_path: Path
) -> None:
    with qwen3_server.client() as client:
        with pytest.raises(NotFoundError, match=r"step 0 of model .* has no files: it is the base model"):
            client.models.checkpoints.download(trained.id, 0, tmp_path / "base")
        with pytest.raises(NotFoundError, match=f"Model {trained.id} has no checkpoint at step 7"):
            client.models.checkpoints.download(trained.id, 7, tmp_path / "seven")
        taken = tmp_path / "taken"
        taken.mkdir()
        (taken / "mine.txt").write_text("keep")
        with pytest.raises(FileExistsError, match=r"exists and is not empty; pass overwrite=True"):
            client.models.checkpoints.download(trained.id, 1, taken)
        assert [p.name for p in taken.iterdir()] == ["mine.txt"]
        client.models.checkpoints.download(trained.id, 1, taken, overwrite=True)
        assert sorted(p.name for p in taken.iterdir()) == [
            "README.md",
            "adapter_config.json",
            "adapter_model.safetensors",
        ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # no staging folder left behind
    r = qwen3_server.http().get(f"/v1/preview/models/{trained.id}/checkpoints/1/files/..%2Fstep1")
    assert r.status_code == 404
