"""The agent loop against the real server: tool calls from the chat endpoint, every turn with its own
token ids and logprobs, groups that log and train through the training API (the step advances and
every turn of every trajectory is trained)."""

from __future__ import annotations

from typing import Any

from conftest import LocalServer
from support.training_helpers import new_model, served
from toolkit.rollouts import Agent, AsyncAgent
from toolkit.tasks import lookup
from toolkit.types.training import Choice, Trajectory, TrajectoryGroup

BASE = "toolkit/tiny-chat-1m"


def two_turns(agent_model: str, client: Any) -> Agent[lookup.Scenario]:
    """Two required calls per episode: the random base model calls (constrained), never answers."""
    return Agent(
        client,
        agent_model,
        lookup.CodeLookup,
        tool_choice="required",
        parallel_tool_calls=False,  # one call per turn (else the random model goes on calling)
        max_turns=2,
        temperature=1.0,
        max_tokens=96,
    )


def test_each_turn_carries_its_own_prompt_and_sampled_tokens(server: LocalServer) -> None:
    client = server.client()
    groups = two_turns(BASE, client).gather(lookup.scenarios(2, seed=0), group_size=2, progress=False)
    assert all(not g.exceptions and len(g.trajectories) == 2 for g in groups)
    for made in (t for g in groups for t in g.trajectories):
        first, second = made.choices()
        for choice in (first, second):
            assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
            assert (
                choice.token_ids and choice.prompt_token_ids and choice.logprobs and choice.logprobs.content
            )
            assert len(choice.logprobs.content) == len(choice.token_ids)
        assert first.message.tool_calls[0].function.name == "get"  # type: ignore[index]
        # the second prompt is the first one, then the call as the template renders it (the random
        # model's spacing inside the arguments may differ from that rendering, so the trainer
        # keeps one sequence per turn when the sampled tokens are not a prefix of the next prompt)
        assert second.prompt_token_ids[: len(first.prompt_token_ids)] == first.prompt_token_ids  # type: ignore[index,arg-type]
        assert len(second.prompt_token_ids) > len(first.prompt_token_ids) + len(first.token_ids) // 2  # type: ignore[arg-type]
        results = [m for m in made.messages_and_choices if not isinstance(m, Choice) and m.role == "tool"]
        assert [r.tool_call_id for r in results] == [
            c.message.tool_calls[0].id  # type: ignore[index]
            for c in (first, second)
        ]
        assert made.metrics["turns"] == 2 and made.metrics["answered"] is False
        assert made.metrics["tool_errors"] == 0  # required calls fit the schema


def scored(groups: list[TrajectoryGroup]) -> list[TrajectoryGroup]:
    """The same groups with rewards that differ within each group, so that RL has advantages."""
    return [
        TrajectoryGroup(
            trajectories=[t.model_copy(update={"reward": float(i)}) for i, t in enumerate(g.trajectories)]
        )
        for g in groups
    ]


def test_multi_turn_groups_log_and_train_every_turn(server: LocalServer) -> None:
    client = server.client()
    model = new_model(client, "agent")
    groups = scored(
        two_turns(served(model, 0), client).gather(lookup.scenarios(3, seed=2), group_size=2, progress=False)
    )
    logged = client.models.log(model.id, split="val", trajectory_groups=groups)
    assert logged.num_trajectories == 6 and logged.metrics is not None
    assert logged.metrics["val/tool_calls"] == 2.0 and logged.metrics["val/turns"] == 2.0
    job = client.training_jobs.create(
        model_id=model.id, trajectory_groups=groups, experimental_config={"ppo": True, "learning_rate": 1e-4}
    )
    checkpoint = job.wait(progress=False)
    assert checkpoint.step == 1  # the step advanced
    assert checkpoint.trained and checkpoint.metrics["data/step_num_groups_trainable"] == 3.0
    # every token the model sampled, in both turns of all 6 trajectories, was trained on
    steps = [e.data for e in client.training_jobs.events.list(job.id) if e.type == "gradient_step"]
    sampled = [len(c.token_ids or []) for g in groups for t in g.trajectories for c in t.choices()]
    assert len(sampled) == 12 and all(sampled)
    assert sum(s["num_trainable_tokens"] for s in steps) == sum(sampled)
    after = two_turns(served(model, 1), client).rollout(lookup.scenarios(1, seed=3)[0])
    assert after.initial_policy_version == 1 and len(after.choices()) == 2


async def test_the_async_agent_against_the_server(server: LocalServer) -> None:
    async with server.async_client() as client:
        agent = AsyncAgent(
            client,
            BASE,
            lookup.CodeLookup,
            tool_choice="required",
            parallel_tool_calls=False,
            max_turns=2,
            max_tokens=96,
        )
        groups = await agent.gather(lookup.scenarios(2, seed=4), group_size=2, progress=False)
    assert all(not g.exceptions and len(g.trajectories) == 2 for g in groups)
    made: Trajectory
    for made in (t for g in groups for t in g.trajectories):
        assert [c.finish_reason for c in made.choices()] == ["tool_calls", "tool_calls"]
        assert all(c.token_ids for c in made.choices())
