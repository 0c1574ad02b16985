"""The two built-in models: the pre-trained default and the random-init one (both weights shipped
with the package), written to the data folder once and rewritten when the shipped weights change,
without transformers: a fresh server starts without importing it, and imports it on first use."""

from __future__ import annotations

import os
import re
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, LlamaForCausalLM

from conftest import LocalServer
from toolkit.server.engine.model import (
    BUILTIN_NAME,
    BUILTIN_WEIGHTS,
    RANDOM_NAME,
    RANDOM_WEIGHTS,
    WEIGHTS_FILE,
    builtin_spec,
    tiny_config,
)

# a sitecustomize.py noting each import of transformers (not blocking it) in $TOOLKIT_TEST_IMPORTS
WATCH_TRANSFORMERS = """
import os, sys


class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "transformers":
            with open(os.environ["TOOLKIT_TEST_IMPORTS"], "a") as fh:
                fh.write(name + "\\n")
        return None


sys.meta_path.insert(0, Watch())
"""


def test_the_default_built_in_model_has_the_shipped_weights(tmp_path: Path) -> None:
    spec = builtin_spec(tmp_path, BUILTIN_NAME)
    assert spec.name == BUILTIN_NAME
    assert (spec.folder / WEIGHTS_FILE).read_bytes() == BUILTIN_WEIGHTS.read_bytes()


def test_the_random_built_in_model_is_the_seeded_initialisation(tmp_path: Path) -> None:
    """If transformers changes how it initialises, this fails: `scripts/train_builtin_model.py --random`
    writes the shipped file again."""
    spec = builtin_spec(tmp_path, RANDOM_NAME)
    torch.manual_seed(0)
    expected = LlamaForCausalLM(tiny_config()).state_dict()
    written = load_file(spec.folder / WEIGHTS_FILE)
    assert (spec.folder / WEIGHTS_FILE).read_bytes() == RANDOM_WEIGHTS.read_bytes()
    assert written and all(torch.equal(tensor, expected[name]) for name, tensor in written.items())
    shipped = load_file(BUILTIN_WEIGHTS)
    assert not torch.equal(shipped["model.embed_tokens.weight"], written["model.embed_tokens.weight"])


def test_the_config_json_written_without_transformers_is_the_built_in_config(tmp_path: Path) -> None:
    read = AutoConfig.from_pretrained(builtin_spec(tmp_path, BUILTIN_NAME).folder).to_dict()
    expected = tiny_config().to_dict()
    where = ("_name_or_path", "transformers_version")
    assert {k: v for k, v in read.items() if k not in where} == {
        k: v for k, v in expected.items() if k not in where
    }


def test_a_fresh_server_starts_without_transformers_and_imports_it_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers' model classes take seconds to import: a server on a fresh data folder (its
    built-in models written there, their KV caches sized) answers without them until a model is used."""
    site, imports = tmp_path / "site", tmp_path / "imports.txt"
    site.mkdir()
    (site / "sitecustomize.py").write_text(WATCH_TRANSFORMERS)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("TOOLKIT_TEST_IMPORTS", str(imports))
    (tmp_path / "data").mkdir()
    server = LocalServer(tmp_path / "data").start()
    try:
        http = server.http()
        assert {m["id"] for m in http.get("/v1/models").json()["data"]} == {BUILTIN_NAME, RANDOM_NAME}
        assert not imports.exists()
        chat = {"model": BUILTIN_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert http.post("/v1/chat/completions", json=chat).status_code == 200
        assert imports.read_text() == "transformers\n"
    finally:
        server.stop()


def test_a_data_folder_from_other_weights_is_rewritten(tmp_path: Path) -> None:
    spec = builtin_spec(tmp_path, BUILTIN_NAME)
    (spec.folder / WEIGHTS_FILE).write_bytes(b"stale")
    (spec.folder / "weights-source.txt").write_text("random-init seed 0")  # an older package's folder
    builtin_spec(tmp_path, BUILTIN_NAME)
    assert (spec.folder / WEIGHTS_FILE).read_bytes() == BUILTIN_WEIGHTS.read_bytes()


def test_the_default_model_answers_in_words(http: httpx.Client) -> None:
    """Notebook 01's first chat: the pre-trained model greets back in readable words and ends its turn."""
    body = http.post(
        "/v1/chat/completions",
        json={"model": BUILTIN_NAME, "messages": [{"role": "user", "content": "hello"}], "temperature": 0},
    ).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert re.fullmatch(r"[A-Z][A-Za-z ,.'!?-]{4,}", choice["message"]["content"]), choice


def test_the_random_model_is_served_by_name(random_http: httpx.Client) -> None:
    """Served by its name, with its own weights: greedy tokens equal transformers' greedy generation
    from the seeded initialisation."""
    served = [m["id"] for m in random_http.get("/v1/models").json()["data"]]
    assert served == [RANDOM_NAME]
    body = random_http.post(
        "/v1/chat/completions",
        json={
            "model": RANDOM_NAME,
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 8,
            "temperature": 0,
            "ignore_eos": True,
            "return_token_ids": True,
        },
    ).json()
    prompt, tokens = body["prompt_token_ids"], body["choices"][0]["token_ids"]
    assert body["usage"]["completion_tokens"] == len(tokens) == 8
    torch.manual_seed(0)
    reference = LlamaForCausalLM(tiny_config()).eval()
    with torch.no_grad():
        out = reference.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, min_new_tokens=8)
    assert out[0, len(prompt) :].tolist() == tokens
