"""``tk.experiment`` over the real server: an SFT job then an RL job under an experiment, exported to
one file that round-trips; ``tk.replay`` of that file on a fresh local server reproduces every
checkpoint digest; a record with its first job's learning rate changed diverges at that job and
every job after it; a record that cannot be compared, SFT data named ``:latest`` and a job made
outside the experiment are each said for what they are."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import toolkit as tk
from conftest import LocalServer
from support.training_helpers import BASE, long_sft_job, new_model, rewarded_group, served, wait_job
from toolkit import seeding
from toolkit.experiments.replay import NO_RECIPE
from toolkit.tasks import reverse
from toolkit.types.experiments import ExperimentRecord
from toolkit.types.records import groups_digest, sha256_hex

SEED = 3
WORDS = ("cat", "dog", "sun", "map", "pen", "cup", "hat", "box")


@pytest.fixture(scope="module")
def exported(server: LocalServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An experiment of one model: an SFT job (step 1), an RL job on groups sampled from step 1."""
    path = tmp_path_factory.mktemp("experiment") / "run.json"
    with server.client() as client, tk.experiment("reverse", seed=SEED) as exp:
        seed_inside = seeding.default_seed()
        model = new_model(client, "experiment")
        sft = client.sft_training_jobs.create_from_data(
            model_id=model.id,
            data=[reverse.conversation(w) for w in WORDS],
            config={"batch_size": 4, "learning_rate": 1e-3},
        )
        sft.wait(progress=False)
        groups = [rewarded_group(client, served(model, 1))]
        rl = client.training_jobs.create(
            model_id=model.id, trajectory_groups=groups, experimental_config={"learning_rate": 1e-3}
        )
        rl.wait(progress=False)
        tracer = tk.tracing.enable(client, "experiment-traces")
        tk.tracing.disable()
        exp.export(path)
        exp.export(path.with_name("small.json"), embed_limit=10)
        records = client.models.records(model.id)
    return {
        "path": path,
        "model": model,
        "jobs": [sft.id, rl.id],
        "groups": groups,
        "records": records,
        "seed_inside": seed_inside,
        "project": tracer.project,
    }


def test_the_exported_file_holds_the_run_and_round_trips(
    server: LocalServer, exported: dict[str, Any]
) -> None:
    text = exported["path"].read_text()
    loaded = tk.load_experiment(exported["path"])
    assert ExperimentRecord.model_validate_json(text) == loaded
    assert json.loads(loaded.model_dump_json()) == json.loads(text)
    assert (exported["seed_inside"], seeding.default_seed()) == (SEED, None)
    assert (loaded.format_version, loaded.name, loaded.seed) == (1, "reverse", SEED)
    assert loaded.deployment is not None and loaded.deployment.base_url == server.url
    assert loaded.packages["torch"] and loaded.python
    assert loaded.trace_projects == [exported["project"]]
    assert [m.model.id for m in loaded.models] == [exported["model"].id]
    assert loaded.models[0].records == exported["records"]
    sft, rl = loaded.jobs
    assert [sft.job_id, rl.job_id] == exported["jobs"]
    assert (sft.kind, sft.status, sft.result_step, rl.kind, rl.status, rl.result_step) == (
        "sft",
        "succeeded",
        1,
        "rl",
        "succeeded",
        2,
    )
    train = "".join(json.dumps({"messages": reverse.conversation(w)}) + "\n" for w in WORDS)
    assert sft.data.embedded and json.loads(sft.data.files["train.jsonl"].splitlines()[0])  # type: ignore[index]
    assert sft.data.digest == sha256_hex(sft.data.files["train.jsonl"].encode())  # type: ignore[index]
    assert [json.loads(line) for line in sft.data.files["train.jsonl"].splitlines()] == [  # type: ignore[index]
        json.loads(line) for line in train.splitlines()
    ]
    assert rl.data.embedded and rl.data.digest == groups_digest(exported["groups"])
    assert "trajectory_groups" not in rl.request and rl.request["experimental_config"] == {
        "learning_rate": 1e-3
    }
    by_job = {r.job_id: r for r in exported["records"]}
    assert [by_job[j.job_id].data_digest for j in (sft, rl)] == [sft.data.digest, rl.data.digest]
    assert loaded.notes == []


def test_replay_on_a_fresh_local_server_reproduces_every_digest(exported: dict[str, Any]) -> None:
    report = tk.replay(exported["path"])
    recorded = [r.checkpoint_digest for r in exported["records"][1:]]
    assert report.ok and report.first_divergence is None, report
    assert [(r.step, r.job_id, r.match) for r in report.rows] == [
        (1, exported["jobs"][0], True),
        (2, exported["jobs"][1], True),
    ]
    assert [r.recorded_digest for r in report.rows] == [r.replayed_digest for r in report.rows] == recorded
    assert all(recorded) and recorded[0] != recorded[1]  # the RL job changed the weights
    assert all(r.metrics["data/step_num_gradient_steps"] > 0 for r in exported["records"][1:])
    html = report._repr_html_()
    assert html.count("<tr>") == 3 and html.count("✓") == 2 and recorded[0][:16] in html


def test_a_changed_first_job_diverges_there_and_every_job_after_it(
    server: LocalServer, exported: dict[str, Any]
) -> None:
    record = tk.load_experiment(exported["path"])
    record.jobs[0].request["config"]["learning_rate"] = 5e-3
    with server.client() as client:
        report = tk.replay(record, client)
    first = report.first_divergence
    assert not report.ok and first is not None
    assert (first.step, first.job_id) == (1, exported["jobs"][0])
    assert first.what.startswith("checkpoint_digest: recorded ")
    assert [(r.job_id, r.match) for r in report.rows] == [(j, False) for j in exported["jobs"]]
    assert report.rows[1].what and report.rows[1].what.startswith("checkpoint_digest: recorded ")


def test_a_record_without_a_checkpoint_digest_is_not_comparable_never_a_match(
    server: LocalServer, exported: dict[str, Any]
) -> None:
    """A record that lost its digest (one from before records, or an edited export) while its job
    trained: the row says so and the report is not ok, though every row it can compare matches."""
    record = tk.load_experiment(exported["path"])
    record.models[0].records[1].checkpoint_digest = None
    with server.client() as client:
        report = tk.replay(record, client)
    sft, rl = report.rows
    assert (sft.comparable, sft.match, rl.comparable, rl.match) == (False, False, True, True)
    assert sft.what == "the record has no checkpoint_digest, though its job took 2 gradient steps"
    assert not report.ok and report.first_divergence is None
    assert "1 not comparable" in repr(report) and "not comparable: the record" in report._repr_html_()


def test_resample_says_why_the_rollouts_are_not_sampled_again(
    server: LocalServer, exported: dict[str, Any]
) -> None:
    with server.client() as client:
        report = tk.replay(exported["path"], client, resample=True)
    assert report.ok and NO_RECIPE in report.notes


def test_data_too_big_to_embed_is_named_by_digest_and_stops_the_replay(
    server: LocalServer, exported: dict[str, Any], tmp_path: Path
) -> None:
    record = tk.load_experiment(exported["path"].with_name("small.json"))
    full = tk.load_experiment(exported["path"])
    assert [(j.data.embedded, j.data.groups, j.data.files) for j in record.jobs] == [(False, None, None)] * 2
    assert [j.data.digest for j in record.jobs] == [j.data.digest for j in full.jobs]
    assert record.notes == [
        f"job {j}: its data is not embedded (too big); the file names it by digest" for j in exported["jobs"]
    ]
    with server.client() as client:
        report = tk.replay(record, client)
    assert [(r.job_id, r.match, r.replayed_digest) for r in report.rows] == [
        (exported["jobs"][0], False, None)
    ]
    assert report.first_divergence is not None and report.first_divergence.what.startswith(
        "data: not embedded"
    )


def test_an_async_client_links_too(server: LocalServer) -> None:
    async def create() -> tuple[str, list[str]]:
        async with server.async_client() as client:
            with tk.experiment("async", seed=1) as exp:
                model = await client.models.create(project="experiments", name="async", base_model=BASE)
            await client.models.create(project="experiments", name="after", base_model=BASE)
            return model.id, exp.model_ids

    made, linked = asyncio.run(create())
    assert linked == [made]


def test_a_model_created_before_the_experiment_is_read_back(server: LocalServer) -> None:
    with server.client() as client:
        model = new_model(client, "before")
        with tk.experiment("before", seed=2) as exp:
            job = client.sft_training_jobs.create_from_data(
                model_id=model.id,
                data=[reverse.conversation(w) for w in WORDS[:4]],
                config={"batch_size": 4, "learning_rate": 1e-3},
            )
            job.wait(progress=False)
        record = exp.record()
        report = tk.replay(record, client)
    assert [m.model.id for m in record.models] == [model.id]
    assert record.models[0].request == {
        "entity": model.entity,
        "project": model.project,
        "name": model.name,
        "base_model": BASE,
        "full_finetuning": True,
    }
    assert record.notes == [
        f"model {model.id} was created before the experiment: its create request is read from it"
    ]
    assert report.ok and [r.step for r in report.rows] == [1]


def test_a_first_job_past_step_0_is_named_in_the_notes(server: LocalServer, exported: dict[str, Any]) -> None:
    record = tk.load_experiment(exported["path"])
    record.jobs = record.jobs[1:]  # the RL job alone: it started from step 1, made by the SFT job
    with server.client() as client:
        report = tk.replay(record, client)
    model, (sft, rl) = exported["model"].id, exported["jobs"]
    assert (
        f"model {model}: job {rl} trained from step 1, made by job {sft} outside the experiment (before its"
        " first job of the experiment); the replay trains it from step 0 instead"
    ) in report.notes
    first = report.first_divergence
    assert first is not None and first.step == 2
    assert first.what.endswith(f"; after step 1, made by job {sft} outside the experiment")


def test_a_job_made_outside_between_two_linked_jobs_is_named_as_the_cause(server: LocalServer) -> None:
    """Jobs 1 and 3 of one model under the experiment, job 2 between them outside it: the replay of
    job 1 matches; job 3, replayed from the replay's step 1, diverges, and job 2 is named as why."""
    data = [reverse.conversation(w) for w in WORDS[:4]]
    config = {"batch_size": 4, "learning_rate": 1e-3}
    with server.client() as client:
        model = new_model(client, "between")
        exp = tk.experiment("between", seed=5).start()
        first = client.sft_training_jobs.create_from_data(model_id=model.id, data=data, config=config)
        first.wait(progress=False)
        exp.stop()
        outside = client.sft_training_jobs.create_from_data(model_id=model.id, data=data, config=config)
        outside.wait(progress=False)
        exp.start()
        third = client.sft_training_jobs.create_from_data(model_id=model.id, data=data, config=config)
        third.wait(progress=False)
        exp.stop()
        report = tk.replay(exp.record(), client)
    assert [(r.job_id, r.step, r.match) for r in report.rows] == [(first.id, 1, True), (third.id, 3, False)]
    assert (
        f"model {model.id}: job {third.id} trained from step 2, made by job {outside.id} outside the"
        f" experiment (after job {first.id}); the replay trains it from step 1 instead"
    ) in report.notes
    what = report.rows[1].what or ""
    assert what.startswith("checkpoint_digest: recorded ")
    assert what.endswith(f"; after step 2, made by job {outside.id} outside the experiment")


def test_sft_data_named_latest_is_exported_as_the_upload_it_trained_on(
    server: LocalServer, tmp_path: Path
) -> None:
    """Two uploads of one name; the job named ``:latest`` when only the first existed: the export
    holds the first (the file the server trained on, by the record's data digest), not the last."""
    first, second = (
        "".join(json.dumps({"messages": reverse.conversation(w)}) + "\n" for w in words)
        for words in (WORDS[:4], WORDS[4:])
    )
    with server.client() as client, tk.experiment("latest", seed=6) as exp:
        model = new_model(client, "latest")
        upload = client.artifacts.upload(project=model.project, name="data", files={"train.jsonl": first})
        latest = upload.url.rsplit(":", 1)[0] + ":latest"
        job = client.sft_training_jobs.create(
            model_id=model.id, training_data_url=latest, config={"batch_size": 4, "learning_rate": 1e-3}
        )
        job.wait(progress=False)
        client.artifacts.upload(project=model.project, name="data", files={"train.jsonl": second})
        path = exp.export(tmp_path / "latest.json")
        report = tk.replay(path, client)
        recorded = client.models.checkpoints.record(model.id, 1)
    (exported,) = tk.load_experiment(path).jobs
    assert exported.data.files == {"train.jsonl": first}
    assert exported.data.digest == recorded.data_digest == sha256_hex(first.encode())
    assert report.ok, report


def test_sft_data_not_among_the_uploads_is_named_by_digest_with_a_note(server: LocalServer) -> None:
    """Data uploaded before the experiment: nothing of the experiment's is exported in its place."""
    with server.client() as client:
        model = new_model(client, "outside-data")
        train = "".join(json.dumps({"messages": reverse.conversation(w)}) + "\n" for w in WORDS[:4])
        upload = client.artifacts.upload(project=model.project, files={"train.jsonl": train})
        with tk.experiment("outside-data", seed=6) as exp:
            client.artifacts.upload(project=model.project, files={"train.jsonl": train + train})
            job = client.sft_training_jobs.create(
                model_id=model.id, training_data_url=upload.url, config={"batch_size": 4}
            )
            job.wait(progress=False)
        record = exp.record()
    (exported,) = record.jobs
    assert (exported.data.embedded, exported.data.files) == (False, None)
    assert exported.data.digest == sha256_hex(train.encode())
    assert (
        f"job {job.id}: no upload of the experiment has the data it trained on (digest"
        f" {exported.data.digest[:16]}…); the file names it by digest only"
    ) in record.notes


def test_exporting_while_a_job_runs_is_refused(server: LocalServer, tmp_path: Path) -> None:
    with server.client() as client:
        model = new_model(client, "running")
        with tk.experiment("running", seed=1) as exp:
            job = long_sft_job(client, model.id, seed=1)
        try:
            with pytest.raises(RuntimeError, match=f"job {job.id} is still (queued|running): wait for it"):
                exp.export(tmp_path / "run.json")
        finally:
            client.training_jobs.cancel(job.id)
            assert wait_job(client, job.id).status == "cancelled"  # it leaves the shared queue now
    assert not (tmp_path / "run.json").exists()
