"""``toolkit serve --chat-template`` and ``--tool-call-parser`` as vLLM names them: a template given
for a base (a file, or one line of template; per base in ``--config``) replaces its own for chat and
for training data (SFT conversations with tools render through it); ``--tool-call-parser hermes`` and
``--enable-auto-tool-choice`` are accepted; what cannot be served ends ``toolkit serve`` in one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from conftest import LocalServer
from support.model_folders import write_folder
from toolkit.cli import main
from toolkit.server.engine.codec import Codec
from toolkit.server.engine.model import resolve_base
from toolkit.server.engine.sources import BaseSource
from toolkit.server.training.sequences import ChatFormat

MARKED = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n[marked] {{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if tools %}<|im_start|>system\n{{ tools | map(attribute='function.name') | join(',') }}<|im_end|>\n"
    "{% endif %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("base") / "qwen3"
    write_folder(path, "qwen3")
    return path


@pytest.fixture(scope="module")
def http(folder: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """One folder served twice by a ``--config`` file: as ``marked`` with a template file of its own,
    and as ``plain`` with the folder's; vLLM's tool options on the command line."""
    tmp = tmp_path_factory.mktemp("serve")
    (tmp / "marked.jinja").write_text(MARKED)
    bases = [
        {"source": str(folder), "names": ["marked"], "chat-template": str(tmp / "marked.jinja")},
        f"{folder}=plain",
    ]
    (tmp / "serve.yaml").write_text(yaml.safe_dump({"base-model": bases}))
    (tmp / "data").mkdir()
    args = ("--config", str(tmp / "serve.yaml"), "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    server = LocalServer(tmp / "data", extra_args=args).start()
    try:
        with server.http() as client:
            yield client
    finally:
        server.stop()


def prompt(http: httpx.Client, model: str, folder: Path) -> str:
    body = {"model": model, "messages": USER, "max_tokens": 1, "return_token_ids": True}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return Codec.from_folder(folder).decode(
        r.json()["prompt_token_ids"], skip_special_tokens=False, spaces_between=False
    )


def test_a_bases_own_template_in_the_config_replaces_the_folders(http: httpx.Client, folder: Path) -> None:
    assert (
        prompt(http, "marked", folder) == "<|im_start|>user\n[marked] hi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert prompt(http, "plain", folder) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_training_data_renders_through_the_given_template(folder: Path, tmp_path: Path) -> None:
    spec = resolve_base(BaseSource(str(folder), ("marked",), MARKED), tmp_path)
    tools = [{"type": "function", "function": {"name": "get_weather"}}]
    rendered = ChatFormat(spec).render(USER, tools, generation_prompt=False)
    assert rendered == "<|im_start|>user\n[marked] hi<|im_end|>\n<|im_start|>system\nget_weather<|im_end|>\n"


def serve_fails(capsys: pytest.CaptureFixture[str], tmp_path: Path, *args: str) -> str:
    """The one line ``toolkit serve`` ends with (exit 2) when asked to serve ``args`` (in-process:
    these are refused before anything is served)."""
    assert main(["serve", "--port", "0", "--data-dir", str(tmp_path / "d"), *args]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


def test_what_cannot_be_served_ends_in_one_line(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "broken.jinja").write_text("{% if %}")
    one = ("--base-model", str(folder))
    assert serve_fails(capsys, tmp_path, *one, "--chat-template", str(tmp_path / "broken.jinja")) == (
        f"toolkit serve: --chat-template {str(tmp_path / 'broken.jinja')!r}: Expected an expression, got "
        "'end of statement block'"
    )
    assert serve_fails(capsys, tmp_path, *one, "--chat-template", "missing.jinja") == (
        "toolkit serve: --chat-template 'missing.jinja': no such file, and not a template"
    )
    assert serve_fails(
        capsys, tmp_path, *one, "--base-model", f"{folder}=b", "--chat-template", "{{ 1 }}"
    ) == (
        "toolkit serve: --chat-template replaces the template of one --base-model; with several, give each "
        "its own chat-template in --config"
    )
    assert serve_fails(capsys, tmp_path, *one, "--tool-call-parser", "mistral") == (
        "toolkit serve: --tool-call-parser 'mistral': this server reads hermes tool calls only"
    )
