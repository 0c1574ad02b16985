"""Experiment tracking: a run's config, per-step metrics (the checkpoints' names, as the sweep's) and
record to a W&B offline run and to an MLflow file store, each read back from disk; a model trained on the real
local server over HTTP, an experiment with an SFT and an RL job, and an exported experiment's JSON.
An SFT job's ``wandb-artifact://`` URL stays a string in W&B; one tracker failing does not stop the
other. Without the packages, ``import toolkit`` imports neither."""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from support.tracking_helpers import new_model, rl_steps
from toolkit.tasks import reverse
from toolkit.tracking import RECORD_FILE, Tracked, TrackingError, tracked
from toolkit.types.training import Model

BLOCK = 32768  # the LevelDB log block of a .wandb file


@dataclass
class Trained:
    client: tk.Client
    model: Model
    metrics: dict[int, dict[str, float]]  # the checkpoints' metrics by step


@pytest.fixture(scope="module")
def trained(server: LocalServer) -> Iterator[Trained]:
    with server.client() as client:
        model = new_model(client, "tracked")
        rl_steps(client, model, 2, seed=5, learning_rate=2e-4)
        metrics = {c.step: dict(c.metrics) for c in client.models.checkpoints.list(model.id)}
        yield Trained(client, model, metrics)


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B's folders under ``tmp_path`` and its output silenced, for an offline run."""
    for name in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_CONFIG_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)  # no key: W&B cannot go online
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))


@pytest.fixture
def mlflow_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The URI of an MLflow file store under ``tmp_path``."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow >= 3.7 asks before using a file store
    return (tmp_path / "mlruns").as_uri()


def wandb_records(path: Path) -> Iterator[Any]:
    """The protobuf records of an offline run's ``.wandb`` file (W&B's 7-byte header, then LevelDB
    log records: crc32c, length, type; full, or first/middle/last chunks)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, chunks = 7, b""
    while pos + 7 <= len(data):
        if BLOCK - pos % BLOCK < 7:  # a block's tail too short for a header is padding
            pos += BLOCK - pos % BLOCK
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        if pos + 7 + length > len(data):  # wandb-core is still writing this record
            return
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        chunks = chunk if kind in (1, 2) else chunks + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            yield record


def read_offline_run(path: Path) -> tuple[dict[str, Any], dict[int, dict[str, float]], list[Any]]:
    """(config, history by step without W&B's own ``_*`` keys, artifacts) of an offline run, once its
    file holds the run's ``exit`` record (wandb-core may still be writing after ``run.finish()``)."""
    deadline = time.monotonic() + 60
    records = list(wandb_records(path))
    while not any(r.WhichOneof("record_type") == "exit" for r in records):
        assert time.monotonic() < deadline, f"{path}: no exit record after 60 s (the run is not whole)"
        time.sleep(0.2)
        records = list(wandb_records(path))
    config: dict[str, Any] = {}
    history: dict[int, dict[str, float]] = {}
    artifacts = []
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "config":
            config |= {item.key: json.loads(item.value_json) for item in record.config.update}
        elif kind == "history":
            items = {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item}
            history[record.history.step.num] = {k: v for k, v in items.items() if not k.startswith("_")}
        elif kind == "artifact":
            artifacts.append(record.artifact)
    return config, history, artifacts


def learning_rate(config: dict[str, Any], step: int) -> Any:
    """Step ``step``'s learning rate in a logged config: ``steps.<N>.learning_rate`` (the job's resolved
    config) or ``steps.<N>.experimental_config.learning_rate`` (its request, from checkpoint records)."""
    prefix = f"steps.{step}."
    (value,) = [v for k, v in config.items() if k.startswith(prefix) and k.endswith(".learning_rate")]
    return value


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def test_import_toolkit_imports_neither_wandb_nor_mlflow() -> None:
    probe = (
        "import sys, toolkit as tk; tk.tracking, tk.plots, tk.widgets, tk.research; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('wandb', 'mlflow')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_without_the_packages_logging_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    source = Tracked("run", {"seed": 1}, {1: {"reward": 0.5}})
    for package, log in (("wandb", tk.tracking.log_wandb), ("mlflow", tk.tracking.log_mlflow)):
        monkeypatch.setitem(sys.modules, package, None)  # import wandb -> ImportError
        with pytest.raises(ImportError, match=r"rl-notebook-toolkit\[tracking\]"):
            log(object(), source)
    with pytest.raises(TypeError, match="wandb or mlflow run"):
        tk.tracking.log_to(object(), source)


@pytest.mark.usefixtures("wandb_offline")
def test_a_model_goes_to_a_wandb_offline_run(trained: Trained, tmp_path: Path) -> None:
    import wandb

    run = wandb.init(mode="offline", dir=tmp_path, project="tests-tracking", name=trained.model.name)
    found = tk.tracking.log_to(run, trained.model.id, client=trained.client)
    sync_file = Path(run.settings.sync_file)
    run.finish()
    config, history, artifacts = read_offline_run(sync_file)
    assert config["model_id"] == trained.model.id and config["base_model"] == trained.model.base_model
    assert learning_rate(config, 1) == learning_rate(config, 2) == pytest.approx(2e-4)
    assert history == {s: pytest.approx(m) for s, m in trained.metrics.items() if m}  # steps 1 and 2
    assert set(history) == {1, 2} and "train/reward" in history[2]
    (artifact,) = artifacts
    assert artifact.type == "experiment-record" and artifact.name == f"{trained.model.name}-record"
    (entry,) = artifact.manifest.contents
    assert entry.path == RECORD_FILE
    assert entry.digest == md5_b64(json.dumps(found.record, sort_keys=True).encode())
    assert [row["step"] for row in found.record["lineage"]] == [0, 1, 2]


def test_a_model_goes_to_an_mlflow_file_store(trained: Trained, tmp_path: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    store = MlflowClient(mlflow_uri)
    run = store.create_run(store.create_experiment("tests-tracking"))
    found = tk.tracking.log_to(run, trained.model.id, client=trained.client, tracking_uri=mlflow_uri)
    store.set_terminated(run.info.run_id)
    back = MlflowClient(mlflow_uri).get_run(run.info.run_id)  # a new client: what is on disk
    assert back.data.params["model_id"] == trained.model.id
    assert float(learning_rate(back.data.params, 2)) == pytest.approx(2e-4)
    for key in ("train/reward", "loss/train"):
        history = MlflowClient(mlflow_uri).get_metric_history(run.info.run_id, key)
        assert {m.step: m.value for m in history} == {
            s: pytest.approx(m[key]) for s, m in trained.metrics.items() if m
        }
        assert back.data.metrics[key] == pytest.approx(trained.metrics[2][key])  # the latest is the last step
    path = MlflowClient(mlflow_uri).download_artifacts(run.info.run_id, RECORD_FILE, str(tmp_path / "back"))
    assert json.loads(Path(path).read_text()) == found.record


DATA_URL = "wandb-artifact:///e/p/train-data:v0"  # W&B takes such a string for an artifact reference


def exported_experiment() -> dict[str, Any]:
    """An exported experiment's JSON (``ExperimentRecord``): two models, one RL and one SFT job."""
    model = {"id": "m1", "entity": "e", "project": "p", "base_model": "toolkit/tiny-chat-1m"}
    records = [
        {"model_id": "m1", "step": s, "base_model": "b", "metrics": {"train/reward": s / 4}}
        for s in (0, 1, 2)
    ]
    return {
        "format_version": 1,
        "name": "repro",
        "seed": 7,
        "python": "3.11",
        "source": {"path": "notebooks/10.ipynb", "kind": "notebook", "git_commit": "abc", "git_dirty": False},
        "deployment": {"name": "local", "base_url": "u", "inference_url": "u/v1", "trace_url": ""},
        "models": [
            {"request": {}, "model": {**model, "name": "first"}, "records": records},
            {"request": {}, "model": {**model, "id": "m2", "name": "second"}, "records": records[:2]},
        ],
        "jobs": [
            {"job_id": "j1", "model_id": "m1", "kind": "rl", "data": {},
             "request": {"model_id": "m1", "experimental_config": {"learning_rate": 1e-4, "seed": 7}}},
            {"job_id": "j2", "model_id": "m2", "kind": "sft", "data": {},
             "request": {"model_id": "m2", "training_data_url": DATA_URL, "config": {"batch_size": 4}}},
        ],
    }  # fmt: skip


def test_an_exported_experiment_is_tracked_from_its_json_or_its_file(tmp_path: Path) -> None:
    doc = exported_experiment()
    found = tracked(doc)
    assert found.name == "repro" and found.record == doc
    assert found.config["seed"] == 7 and found.config["source.git_commit"] == "abc"
    assert found.config["deployment.name"] == "local"
    assert found.config["jobs.0.rl.experimental_config.learning_rate"] == 1e-4
    assert found.config["jobs.1.sft.config.batch_size"] == 4 and "jobs.1.sft.model_id" not in found.config
    assert found.config["jobs.1.sft.training_data_url"] == DATA_URL
    assert found.metrics == {
        0: {"first/train/reward": 0.0, "second/train/reward": 0.0},
        1: {"first/train/reward": 0.25, "second/train/reward": 0.25},
        2: {"first/train/reward": 0.5},
    }
    path = tmp_path / "experiment.json"
    path.write_text(json.dumps(doc))
    assert tracked(path) == tracked(str(path)) == found
    with pytest.raises(ValueError, match="client="):
        tracked("a-model-id")
    with pytest.raises(TypeError, match="cannot track"):
        tracked(3)


@pytest.mark.usefixtures("wandb_offline")
def test_track_starts_logs_and_finishes_a_run_of_each(tmp_path: Path, mlflow_uri: str) -> None:
    from mlflow.tracking import MlflowClient

    doc = exported_experiment()
    ids = tk.tracking.track(
        ["wandb", "mlflow"], doc, tracking_uri=mlflow_uri, mode="offline", dir=str(tmp_path)
    )
    (sync_file,) = (tmp_path / "wandb").glob(f"offline-run-*-{ids['wandb']}/run-{ids['wandb']}.wandb")
    config, history, _ = read_offline_run(sync_file)
    assert config["seed"] == 7 and history[2] == {"first/train/reward": 0.5}
    assert config["jobs.1.sft.training_data_url"] == DATA_URL  # a string, not an artifact it used
    run = MlflowClient(mlflow_uri).get_run(ids["mlflow"])
    assert run.info.status == "FINISHED" and run.info.run_name == "repro"
    assert run.data.params["jobs.0.rl.experimental_config.learning_rate"] == "0.0001"
    assert run.data.params["jobs.1.sft.training_data_url"] == DATA_URL
    assert run.data.metrics["second/train/reward"] == 0.25
    with pytest.raises(ValueError, match="'wandb' or 'mlflow'"):
        tk.tracking.track(["tensorboard"], doc)
    with pytest.raises(TypeError, match="as a list"):
        tk.tracking.track("wandb", doc)


@pytest.mark.usefixtures("wandb_offline")
def test_one_tracker_failing_does_not_stop_the_other(tmp_path: Path, mlflow_uri: str) -> None:
    """W&B online with no API key fails at ``wandb.init``; MLflow still gets its whole run, and the
    error names the failure and the run that was logged, in one line."""
    from mlflow.tracking import MlflowClient

    doc = exported_experiment()
    with pytest.raises(TrackingError) as failed:
        tk.tracking.track(["wandb", "mlflow"], doc, tracking_uri=mlflow_uri, mode="online", dir=str(tmp_path))
    (mlflow_run,) = failed.value.runs.values()
    assert list(failed.value.failed) == ["wandb"] and list(failed.value.runs) == ["mlflow"]
    line = (
        "TrackingError: logging failed to wandb: UsageError: No API key configured. Use `wandb login` to"
        f" log in. (logged: mlflow run {mlflow_run})"
    )
    assert failed.value._render_traceback_() == [line]
    run = MlflowClient(mlflow_uri).get_run(mlflow_run)
    assert run.info.status == "FINISHED" and run.data.metrics["second/train/reward"] == 0.25
    assert run.data.params["jobs.1.sft.training_data_url"] == DATA_URL


@pytest.mark.usefixtures("wandb_offline")
def test_an_experiment_with_an_sft_and_an_rl_job_lands_in_both_when_it_closes(
    server: LocalServer, tmp_path: Path, mlflow_uri: str
) -> None:
    """The README's recipe (an SFT warm start, then RL) under ``track=``: W&B keeps the SFT job's
    ``wandb-artifact://`` data URL as the string it is (it went online to resolve it before), and
    both stores hold the config and both steps' metrics."""
    from mlflow.tracking import MlflowClient

    options = {"tracking_uri": mlflow_uri, "mode": "offline", "dir": str(tmp_path)}
    with server.client() as client:
        with tk.experiment(
            "tracked-run", seed=3, client=client, track=["wandb", "mlflow"], track_options=options
        ) as exp:
            model = new_model(client, "experiment")
            sft = client.sft_training_jobs.create_from_data(
                model_id=model.id,
                data=[reverse.conversation(w) for w in ("cat", "dog", "sun", "map")],
                config={"batch_size": 2, "learning_rate": 1e-3},
            )
            sft.wait(progress=False)
            rl_steps(client, model, 1, seed=3, learning_rate=3e-4)
            assert exp.tracked_runs == {}  # nothing logged while it is open
        metrics = {c.step: dict(c.metrics) for c in client.models.checkpoints.list(model.id) if c.step}
        data_url = exp.record().jobs[0].request["training_data_url"]
    assert data_url.startswith("wandb-artifact:///") and set(metrics[1]) != set(metrics[2])
    ids = exp.tracked_runs
    (sync_file,) = (tmp_path / "wandb").glob(f"offline-run-*-{ids['wandb']}/run-{ids['wandb']}.wandb")
    config, history, artifacts = read_offline_run(sync_file)
    assert config["name"] == "tracked-run" and config["seed"] == 3
    assert config["jobs.0.sft.training_data_url"] == data_url
    assert config["jobs.1.rl.experimental_config.learning_rate"] == pytest.approx(3e-4)
    assert history == {1: pytest.approx(metrics[1]), 2: pytest.approx(metrics[2])}
    assert len(artifacts) == 1
    run = MlflowClient(mlflow_uri).get_run(ids["mlflow"])
    assert run.data.params["seed"] == "3" and run.info.run_name == "tracked-run"
    assert run.data.params["jobs.0.sft.training_data_url"] == data_url
    assert run.data.metrics["train/reward"] == pytest.approx(metrics[2]["train/reward"])
    for key in ("loss/train", "train/reward"):
        steps = MlflowClient(mlflow_uri).get_metric_history(ids["mlflow"], key)
        assert {m.step: m.value for m in steps} == {
            s: pytest.approx(m[key]) for s, m in metrics.items() if key in m
        }


@pytest.mark.usefixtures("wandb_offline")
def test_an_experiment_whose_tracker_fails_keeps_the_runs_logged(
    server: LocalServer, tmp_path: Path, mlflow_uri: str
) -> None:
    from mlflow.tracking import MlflowClient

    options = {"tracking_uri": mlflow_uri, "mode": "online", "dir": str(tmp_path)}
    with server.client() as client:
        trackers = ["wandb", "mlflow"]
        exp = tk.experiment("failing-tracker", seed=4, client=client, track=trackers, track_options=options)
        with pytest.raises(TrackingError, match=r"^logging failed to wandb: UsageError"), exp:
            model = new_model(client, "experiment")
            rl_steps(client, model, 1, seed=4)
    assert list(exp.tracked_runs) == ["mlflow"]
    run = MlflowClient(mlflow_uri).get_run(exp.tracked_runs["mlflow"])
    assert run.info.status == "FINISHED" and "train/reward" in run.data.metrics
