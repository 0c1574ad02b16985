"""JobLauncher and JobMonitor against the real local server: validate, launch RL and SFT, watch them end."""

from __future__ import annotations

import json

from widget_support import group, new_model

from toolkit.widgets import JobLauncher, JobMonitor
from toolkit.widgets.launcher import sft_jsonl

NO_LOGPROBS = "true"  # hand-made trajectories carry no logprobs


def test_validate_lists_problems_before_sending(server) -> None:
    client = server.client()
    launcher = JobLauncher(client, model_id="missing")
    launcher.model.value = None
    problems = launcher.validate()
    assert "choose or create a model" in problems and "no trajectory groups to train on" in problems
    launcher.experimental["loss_fn"].value = "sgd"
    launcher.experimental["epsilon"].value = "wide"
    problems = launcher.validate()
    assert any(p.startswith("loss_fn:") for p in problems) and any(p.startswith("epsilon:") for p in problems)
    launcher._launch()
    assert "loss_fn" in launcher.issues.value and launcher.monitor is None
    launcher.kind.value = "sft"
    assert launcher.learning_rate.value == 5e-5 and launcher.sft_box.layout.display is None
    launcher.sft_data.value = '{"messages": [{"role": "user", "content": "hi"}]}\nnope'
    assert {
        "line 1: the last message must be the assistant's",
        "line 2: not a JSON object with messages",
    } <= set(launcher.validate())


def test_defaults_shown_and_config_built(server) -> None:
    launcher = JobLauncher(server.client(), groups=[group([0.0, 1.0])])
    assert launcher.experimental["loss_fn"].placeholder == "cispo"
    assert launcher.experimental["importance_sampling_level"].placeholder == "token"
    assert set(launcher.experimental) | {"learning_rate"} == set(
        type(launcher.experimental_config()).model_fields
    )
    launcher.experimental["ppo"].value = "true"
    launcher.experimental["epsilon"].value = "0.1"
    cfg = launcher.experimental_config()
    assert cfg.ppo is True and cfg.epsilon == 0.1 and cfg.learning_rate == 5e-6
    assert cfg.model_fields_set == {"ppo", "epsilon", "learning_rate"}


def test_create_model_and_launch_rl_job_to_the_end(server) -> None:
    client = server.client()
    launcher = JobLauncher(client, groups=[group([0.0, 1.0]), group([1.0, 0.5])], interval=0.2)
    launcher.new_base.value = client.served_models().data[0].id
    model = launcher.create_model("launched-rl")
    assert launcher.model.value == model.id
    launcher.experimental["allow_training_without_logprobs"].value = NO_LOGPROBS
    assert launcher.validate() == []
    monitor = launcher.launch()
    assert isinstance(monitor, JobMonitor) and launcher.output.children == (monitor,)
    job = monitor.wait(timeout=180)
    assert job is not None and job.status == "succeeded" and not monitor.polling
    assert monitor.progress.value == monitor.progress.max == job.num_sequences
    assert monitor.progress.bar_style == "success" and monitor.cancel_button.disabled
    events = monitor.events
    assert events["type"].iloc[0] == "training_started" and events["type"].iloc[-1] == "training_ended"
    assert events["loss"].notna().sum() == job.num_sequences
    assert len(monitor.figure.data[0].y) == job.num_sequences
    assert "training_ended" in monitor.table.value and monitor.failure.layout.display == "none"


def test_launch_sft_job(server) -> None:
    client = server.client()
    model = new_model(client)
    launcher = JobLauncher(client, model_id=model.id, groups=[group([1.0])], interval=0.2)
    launcher.kind.value = "sft"
    assert json.loads(launcher.sft_data.value.splitlines()[0])["messages"][-1]["role"] == "assistant"
    launcher.batch_size.value = "2"
    assert launcher.sft_config().batch_size == 2
    job = launcher.launch().wait(timeout=180)
    assert job is not None and job.status == "succeeded" and job.kind == "sft"


def test_sft_jsonl_turns_choices_into_assistant_messages() -> None:
    line = json.loads(sft_jsonl([group([1.0], prompt="hi")]))
    assert line == {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "answer 1.0"}]
    }


def test_monitor_shows_failure_and_several_run_at_once(server) -> None:
    client = server.client()
    model = new_model(client)
    bad = client.training_jobs.create(model_id=model.id, trajectory_groups=[group([0.0, 1.0])])
    good = client.training_jobs.create(
        model_id=model.id,
        trajectory_groups=[group([0.0, 1.0])],
        experimental_config={"allow_training_without_logprobs": True},
    )
    monitors = [JobMonitor(client, j.id, interval=0.2) for j in (bad, good)]
    jobs = [m.wait(timeout=180) for m in monitors]
    assert [j.status for j in jobs if j] == ["failed", "succeeded"]
    failed = monitors[0]
    assert failed.failure.layout.display is None and "Training failed" in failed.failure.value
    assert failed.progress.bar_style == "danger"
    assert failed.events["type"].iloc[-1] == "training_failed"


def test_monitor_cancel_and_manual_poll(server) -> None:
    client = server.client()
    model = new_model(client)
    created = client.training_jobs.create(
        model_id=model.id,
        trajectory_groups=[group([0.0, 1.0])] * 4,
        experimental_config={"allow_training_without_logprobs": True},
    )
    monitor = JobMonitor(client, created.id, start=False)
    assert not monitor.polling
    monitor.poll()
    monitor.cancel()
    assert monitor.job is not None
    while monitor.poll():
        pass
    assert monitor.job.status in {"cancelled", "succeeded"} and monitor.done
