"""Errors around experiments say what is wrong, where, and what to do, in one line in IPython: a bad
argument to ``tk.experiment`` when it is given (not at export); a file ``tk.load_experiment`` cannot
read (cut short, a notebook, from a newer toolkit, not an export, embedded data edited after the
export); a replay on a deployment without the recorded base model; the record of a missing step.
A real export of an SFT and an RL job on the local server over loopback HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import new_model, rewarded_group, served
from toolkit import seeding
from toolkit.experiments import ExperimentFileError
from toolkit.tasks import reverse
from toolkit.types.experiments import FORMAT_VERSION

NOTEBOOK = Path(__file__).parents[2] / "notebooks" / "10_reproducibility.ipynb"


@pytest.fixture(scope="module")
def exported(server: LocalServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export of one model: an SFT job (step 1), then an RL job on a group sampled from step 1."""
    path = tmp_path_factory.mktemp("errors") / "run.json"
    with server.client() as client, tk.experiment("errors", seed=5, client=client) as exp:
        model = new_model(client, "errors")
        client.sft_training_jobs.create_from_data(
            model_id=model.id, data=[reverse.conversation(w) for w in ("cat", "dog")]
        ).wait(progress=False)
        group = rewarded_group(client, served(model, 1))
        client.training_jobs.create(model_id=model.id, trajectory_groups=[group]).wait(progress=False)
        exp.export(path)
    return path


def shown(cell: str, **names: Any) -> list[str]:
    """What IPython shows of a cell that raises: its output lines."""
    shell = InteractiveShell.instance()
    shell.user_ns.update(tk=tk, **names)
    with capture_output() as out:
        shell.run_cell(cell)
    assert out.stderr == ""
    return out.stdout.strip().splitlines()


def load_error(path: Path) -> str:
    """The one line IPython shows for ``tk.load_experiment(path)``."""
    (line,) = shown("tk.load_experiment(path)", path=path)
    assert line.startswith("ExperimentFileError: ")
    with pytest.raises(ExperimentFileError) as raised:
        tk.load_experiment(path)
    assert line == f"ExperimentFileError: {raised.value}"
    return line.removeprefix("ExperimentFileError: ")


def test_a_bad_argument_is_refused_when_it_is_given() -> None:
    for arguments, error, message in (
        ({"seed": "abc"}, TypeError, "an experiment's seed is an integer, not 'abc'"),
        ({"seed": True}, TypeError, "an experiment's seed is an integer, not True"),
        ({"seed": 1, "track": "wandb"}, TypeError, "give the trackers as a list"),
        ({"seed": 1, "track": ["tensorboard"]}, ValueError, "'wandb' or 'mlflow', not 'tensorboard'"),
        ({"seed": 1, "client": "http://localhost"}, TypeError, "client= takes a tk.Client"),
        ({"seed": 1, "track_options": ["offline"]}, TypeError, "track_options= takes a dict"),
    ):
        with pytest.raises(error, match=message):
            tk.experiment("run", **arguments)
    with pytest.raises(ValueError, match="name is a non-empty string"):
        tk.experiment(" ", seed=1)
    assert seeding.default_seed() is None  # nothing was opened
    assert tk.experiment("run", seed=2**70, track=("mlflow",)).seed == 2**70


def test_a_file_cut_short_names_itself_and_says_to_export_again(exported: Path, tmp_path: Path) -> None:
    text = exported.read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    lines = len(text[: len(text) // 2].splitlines())
    message = load_error(cut)
    assert message.startswith(f"{cut} is not whole JSON (") and f" of {lines}): " in message
    assert message.endswith("it was cut short or edited; export the experiment again")


def test_a_notebook_an_other_json_and_a_newer_file_say_what_they_are(exported: Path, tmp_path: Path) -> None:
    assert load_error(NOTEBOOK) == (
        f"{NOTEBOOK} is a notebook, not an exported experiment: load the file exp.export(path) wrote"
    )
    other = tmp_path / "other.json"
    other.write_text(json.dumps([1, 2]))
    assert load_error(other) == (
        f"{other} is not an exported experiment (no format_version): load the file exp.export(path) wrote"
    )
    doc = json.loads(exported.read_text())
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**doc, "format_version": FORMAT_VERSION + 1}))
    assert load_error(newer) == (
        f"{newer} was written by a newer toolkit (format_version {FORMAT_VERSION + 1}; toolkit"
        f" {tk.__version__} reads up to {FORMAT_VERSION}): upgrade it (pip install -U rl-notebook-toolkit)"
    )
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({**doc, "seed": "seven"}))
    assert load_error(broken).startswith(f"{broken}: seed: Input should be a valid integer")


def test_embedded_data_edited_after_the_export_is_refused_naming_the_field(
    exported: Path, tmp_path: Path
) -> None:
    doc = json.loads(exported.read_text())
    assert tk.load_experiment(exported).jobs[1].data.groups == doc["jobs"][1]["data"]["groups"]
    rl = json.loads(json.dumps(doc))
    rl["jobs"][1]["data"]["groups"][0]["trajectories"][1]["reward"] = 0.5
    sft = json.loads(json.dumps(doc))
    sft["jobs"][0]["data"]["files"]["train.jsonl"] = sft["jobs"][0]["data"]["files"]["train.jsonl"].replace(
        "cat", "cab"
    )
    for edited, field in ((rl, "jobs[1].data.groups"), (sft, "jobs[0].data.files['train.jsonl']")):
        path = tmp_path / "edited.json"
        path.write_text(json.dumps(edited))
        assert load_error(path) == (
            f"{path}: {field} no longer matches its digest (edited after the export?): a replay would"
            " train on other data than the run did; export the experiment again"
        )


def test_a_replay_without_the_base_model_says_so_in_one_line(
    server: LocalServer, exported: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record = tk.load_experiment(exported)
    missing = "HuggingFaceTB/not-a-model-toolkit-tests"
    record.models[0].model.base_model = missing
    with server.client() as client:
        (line,) = shown("tk.replay(record, client)", record=record, client=client)
    assert line == (
        f"UnprocessableEntityError: Error code: 422 - body.base_model: unknown base model '{missing}';"
        " served: toolkit/tiny-chat-1m, toolkit/tiny-random-1m"
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the fresh server looks in the hub cache only
    (line,) = shown("tk.replay(record)", record=record)
    assert line.startswith(
        f"ServerNotStarted: the toolkit server exited with code 2: toolkit serve: base model '{missing}'"
        " is not in the Hugging Face cache"
    )
    assert "download it once online, or serve a folder" in line


def test_the_record_of_a_missing_step_is_one_line_naming_the_model(server: LocalServer) -> None:
    with server.client() as client:
        model = new_model(client, "errors-steps")
        lines = shown("client.models.checkpoints.record(model_id, 9)", client=client, model_id=model.id)
    assert lines == [f"NotFoundError: Error code: 404 - Model {model.id} has no checkpoint at step 9"]
