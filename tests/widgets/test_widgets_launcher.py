"""JobLauncher and JobMonitor against the real local server: validate, launch RL and SFT, watch them end,
cancel deterministically."""

from __future__ import annotations

import time
from typing import Any

from support.widget_support import click, group, new_model
from toolkit.client.sft_data import train_jsonl
from toolkit.tasks import reverse
from toolkit.widgets import CheckpointExplorer, JobLauncher, JobMonitor

NO_LOGPROBS = "true"  # hand-made trajectories carry no logprobs


def test_validate_lists_problems_before_sending(server: Any) -> None:
    client = server.client()
    launcher = JobLauncher(client, model_id="missing")
    assert launcher.model.value is None  # nothing loaded before start()
    problems = launcher.validate()
    assert problems == ["choose or create a model", "no trajectory groups to train on"]
    assert launcher.problems == problems
    launcher.experimental["loss_fn"].value = "sgd"
    launcher.experimental["epsilon"].value = "wide"
    problems = launcher.validate()
    assert sorted(p.split(":")[0] for p in problems[1:3]) == ["epsilon", "loss_fn"]
    click(launcher, "Launch")
    assert launcher.status_line.kind == "error" and "loss_fn" in launcher.status_line.text
    assert launcher.monitor is None and launcher.job_id is None
    launcher.kind.value = "sft"
    assert launcher.learning_rate.value == 5e-5 and launcher.sft_box.layout.display is None
    launcher.sft_data.value = '{"messages": [{"role": "user", "content": "hi"}]}\nnope'
    assert launcher.validate()[1:] == [
        "line 1: the last message must be the assistant's",
        "line 2: not a JSON object with messages",
    ]


def test_defaults_shown_and_config_built(server: Any) -> None:
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


def test_rl_groups_without_logprobs_are_refused_before_launch(server: Any) -> None:
    client = server.client()
    model = new_model(client)
    # group 1 has no reward variance: the job would skip it, so it is not a problem
    launcher = JobLauncher(client, groups=[group([0.0, 1.0]), group([1.0, 1.0])], model_id=model.id).start()
    (problem,) = launcher.validate()
    assert problem.startswith("2 choice(s) lack the logprobs or token ids an RL job trains on")
    assert "(group 0, trajectory 0, message 1: no logprobs and no token ids, and 1 more)" in problem
    assert "allow_training_without_logprobs" in problem
    click(launcher, "Launch")
    assert launcher.job_id is None and launcher.status_line.text == problem
    launcher.experimental["allow_training_without_logprobs"].value = NO_LOGPROBS
    assert launcher.validate() == []


def test_create_model_and_launch_rl_job_to_the_end(server: Any) -> None:
    client = server.client()
    launcher = JobLauncher(client, groups=[group([0.0, 1.0]), group([1.0, 0.5])], interval=0.2)
    launcher.new_base.value = client.served_models().data[0].id
    model = launcher.create_model("launched-rl")
    assert launcher.model.value == model.id
    launcher.experimental["allow_training_without_logprobs"].value = NO_LOGPROBS
    assert launcher.validate() == []
    monitor = launcher.launch()
    assert isinstance(monitor, JobMonitor) and launcher.output.children == (monitor,)
    assert launcher.job_id == monitor.job_id and monitor.started
    job = monitor.wait(timeout=180)
    assert job is not None and job.status == "succeeded" and job.num_sequences
    assert (monitor.status, monitor.done, monitor.polling) == ("succeeded", True, False)
    assert monitor.num_steps == monitor.total_steps == job.num_sequences
    assert monitor.progress.value == monitor.progress.max == job.num_sequences
    assert monitor.progress.bar_style == "success" and monitor.cancel_button.disabled
    events = monitor.events
    assert events["type"].iloc[0] == "training_started" and events["type"].iloc[-1] == "training_ended"
    assert events["loss"].notna().sum() == job.num_sequences
    assert [t.name for t in monitor.figure.data] == ["loss", "reward"]
    assert len(monitor.figure.data[0].y) == job.num_sequences
    assert "training_ended" in monitor.table.value and monitor.failure.layout.display == "none"


def test_launch_sft_job_reuses_the_clients_sft_data(server: Any) -> None:
    client = server.client()
    model = new_model(client)
    groups = [group([1.0])]
    launcher = JobLauncher(client, model_id=model.id, groups=groups, interval=0.2).start()
    launcher.kind.value = "sft"
    assert launcher.sft_data.value == train_jsonl(groups[0].trajectories).decode()
    launcher.batch_size.value = "2"
    assert launcher.sft_config().batch_size == 2
    monitor = launcher.launch()
    job = monitor.wait(timeout=180)
    assert job is not None and job.status == "succeeded" and job.kind == "sft"
    # an SFT job reports a loss and no reward: one panel
    assert [t.name for t in monitor.figure.data] == ["loss"]
    layout = monitor.figure.to_dict()["layout"]
    assert layout["yaxis"]["title"]["text"] == "loss" and "yaxis2" not in layout


def test_monitor_shows_failure_and_several_run_at_once(server: Any) -> None:
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
    assert failed.error is not None and "no logprobs" in failed.error
    assert failed.progress.bar_style == "danger" and failed.status == "failed"
    assert failed.events["type"].iloc[-1] == "training_failed"


def test_monitor_cancels_a_running_and_a_queued_job(fresh_server: Any) -> None:
    """Jobs of one model run in order: the second waits queued behind the first, which is long (one
    gradient step per conversation), so both cancels land before either job can end. A server of its
    own: on the shared one, a job of another test could be ahead in the queue."""
    client = fresh_server.client()
    model = new_model(client)
    data = [reverse.conversation(w) for w in reverse.sample_words(2000, seed=3)]
    config = {"batch_size": 1, "learning_rate": 1e-6}
    running = client.sft_training_jobs.create_from_data(model_id=model.id, data=data, config=config)
    queued = client.sft_training_jobs.create_from_data(model_id=model.id, data=data[:4])
    first, second = JobMonitor(client, running.id), JobMonitor(client, queued.id)
    while first.poll() and first.num_steps == 0:
        time.sleep(0.05)  # until the first gradient step
    assert first.status == "running" and not first.polling  # polled by hand: no thread
    second.poll()
    assert second.status == "queued" and not second.done
    assert second.queued_behind == 1 and "queued behind 1 job(s)" in second.header.value
    second.cancel()
    first.cancel()
    assert first.status_line.text == "cancel requested"
    for monitor in (first, second):
        while monitor.poll():
            time.sleep(0.05)
        assert (monitor.status, monitor.done) == ("cancelled", True)
        assert monitor.events["type"].iloc[-1] == "training_failed"
        assert "Training cancelled" in monitor.failure.value and monitor.progress.bar_style == "warning"
    assert first.num_steps < len(data)


def test_an_untrained_step_and_stale_groups_show_where_the_user_looks(server: Any) -> None:
    """Groups sampled at step 0 whose rewards are all equal: the first job trains nothing (the monitor
    and the explorer say so); launching them again, now behind step 1, warns in the launcher."""
    client = server.client()
    model = new_model(client)
    flat = group([1.0, 1.0])
    for trajectory in flat.trajectories:
        trajectory.initial_policy_version = trajectory.final_policy_version = 0
    launcher = JobLauncher(client, groups=[flat], model_id=model.id, interval=0.2).start()
    monitor = launcher.launch()
    assert launcher.status_line.kind == "ok"
    monitor.wait(timeout=180)
    assert (monitor.status, monitor.trained) == ("succeeded", False)
    assert monitor.warnings == [
        "Nothing trained: every group's rewards are equal (1 group), so every advantage is 0. Step 1 is"
        " step 0's model unchanged (its checkpoint says trained: false)."
    ]
    assert monitor.notice.layout.display is None and "Nothing trained" in monitor.notice.value
    assert "succeeded (nothing trained)" in monitor.header.value and monitor.progress.bar_style == "warning"

    explorer = CheckpointExplorer(client, [model.id]).start()
    assert explorer.checkpoints["trained"].tolist()[1] is False
    assert [label for label, _ in explorer.selection.options][1].endswith("step 1 (untrained)")

    launcher.launch()  # the same groups again: sampled at step 0, the model is at step 1
    assert launcher.status_line.kind == "warning"
    assert (
        "were sampled from step 0, older than the model's latest checkpoint (step 1)"
        in launcher.status_line.text
    )
    assert launcher.monitor is not None and launcher.monitor.wait(timeout=180) is not None
