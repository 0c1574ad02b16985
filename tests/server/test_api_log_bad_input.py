"""``POST /v1/preview/models/{id}/log`` with bad or extreme input: malformed bodies and non-finite
rewards are a 422 that stores nothing, extreme finite rewards and metric values give finite means,
metric values that are not numbers are refused, and the trajectory query is validated."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from support.reliability_support import create_model


def _traj(**fields: Any) -> dict[str, Any]:
    return {"split": "val", "trajectory_groups": [{"trajectories": [fields]}]}


TG = ["body", "trajectory_groups", 0, "trajectories", 0]


@pytest.mark.parametrize(
    ("body", "locs"),
    [
        ({}, [["body", "split"], ["body", "trajectory_groups"]]),
        ({"split": "val"}, [["body", "trajectory_groups"]]),
        ({"trajectory_groups": []}, [["body", "split"]]),
        ({"split": 1, "trajectory_groups": []}, [["body", "split"]]),
        ({"split": "", "trajectory_groups": []}, [["body", "split"]]),
        ({"split": "a/b", "trajectory_groups": []}, [["body", "split"]]),
        ({"split": "val", "trajectory_groups": {}}, [["body", "trajectory_groups"]]),
        ({"split": "val", "trajectory_groups": [{}]}, [["body", "trajectory_groups", 0, "trajectories"]]),
        (_traj(reward="high"), [[*TG, "reward"]]),
        (_traj(messages_and_choices="hi"), [[*TG, "messages_and_choices"]]),
        (
            _traj(messages_and_choices=[{"content": "no role"}]),
            [[*TG, "messages_and_choices", 0, "message", "role"]],
        ),
        (_traj(logs="x"), [[*TG, "logs"]]),
        (
            {"split": "val", "trajectory_groups": [{"trajectories": [], "exceptions": [{"message": "m"}]}]},
            [["body", "trajectory_groups", 0, "exceptions", 0, "type"]],
        ),
    ],
)
def test_log_rejects_bad_input(http: httpx.Client, body: dict[str, Any], locs: list[list[str | int]]) -> None:
    model_id = create_model(http)["id"]
    r = http.post(f"/v1/preview/models/{model_id}/log", json=body)
    assert r.status_code == 422, r.text
    assert [item["loc"] for item in r.json()["detail"]] == locs
    assert http.get(f"/v1/preview/models/{model_id}/trajectories").json() == []


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_log_rejects_non_finite_rewards(http: httpx.Client, number: bytes) -> None:
    model_id = create_model(http)["id"]
    body = b'{"split": "val", "trajectory_groups": [{"trajectories": [{"reward": %s}]}]}' % number
    r = http.post(
        f"/v1/preview/models/{model_id}/log", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == 422, r.text
    assert [item["loc"] for item in r.json()["detail"]] == [[*TG, "reward"]]
    assert http.get(f"/v1/preview/models/{model_id}/checkpoints").json()["data"][0]["metrics"] == {}


@pytest.mark.parametrize(
    ("rewards", "reward", "std"),
    [([-2.8e160, 1.1], -1.4e160, 1.4e160), ([1e308, -1e308], 0.0, 1e308), ([1e308, 1e308], 1e308, 0.0)],
)
def test_extreme_finite_rewards_never_fail(
    server: Any, rewards: list[float], reward: float, std: float
) -> None:
    """The statistics do not overflow, and the keep-alive connection serves the next request."""
    with server.http() as http:  # one connection for every request below
        model_id = create_model(http)["id"]
        group = {"trajectories": [{"reward": r} for r in rewards]}
        r = http.post(
            f"/v1/preview/models/{model_id}/log", json={"split": "val", "trajectory_groups": [group]}
        )
        assert r.status_code == 200, r.text
        metrics = r.json()["metrics"]
        assert (metrics["val/reward"], metrics["val/reward_std_dev"]) == (
            pytest.approx(reward, rel=1e-12),
            pytest.approx(std, rel=1e-12),
        )
        assert http.get("/v1/health").status_code == 200
        checkpoint = http.get(f"/v1/preview/models/{model_id}/checkpoints").json()["data"][0]
        assert checkpoint["metrics"] == metrics


def test_metric_values_that_are_not_finite_are_left_out_of_the_means(server: Any, http: httpx.Client) -> None:
    model_id = create_model(http)["id"]
    first = b'{"reward": 1, "metrics": {"m": Infinity, "n": 2, "o": NaN}}'
    second = b'{"metrics": {"m": 1, "n": 1e308, "o": -Infinity}}'
    body = b'{"split": "val", "trajectory_groups": [{"trajectories": [%s, %s]}]}' % (first, second)
    r = http.post(
        f"/v1/preview/models/{model_id}/log", content=body, headers={"content-type": "application/json"}
    )
    assert r.status_code == 200, r.text
    metrics = r.json()["metrics"]
    assert (metrics["val/m"], metrics["val/n"]) == (1.0, 5e307)
    assert "val/o" not in metrics  # no finite value at all
    assert http.get(f"/v1/preview/models/{model_id}/checkpoints").json()["data"][0]["metrics"] == metrics
    assert [c.metrics for c in server.client().models.checkpoints.list(model_id)] == [metrics]


def test_custom_metrics_that_are_not_numbers_are_rejected(http: httpx.Client) -> None:
    model_id = create_model(http)["id"]
    r = http.post(f"/v1/preview/models/{model_id}/log", json=_traj(reward=1.0, metrics={"m": "high"}))
    assert r.status_code == 422
    assert {tuple(item["loc"][:7]) for item in r.json()["detail"]} == {(*TG, "metrics", "m")}


def test_trajectories_query_validation(http: httpx.Client) -> None:
    model_id = create_model(http)["id"]
    for params, loc in [
        ({"limit": 0}, ["query", "limit"]),
        ({"limit": 1001}, ["query", "limit"]),
        ({"offset": -1}, ["query", "offset"]),
        ({"step": "x"}, ["query", "step"]),
    ]:
        r = http.get(f"/v1/preview/models/{model_id}/trajectories", params=params)
        assert (r.status_code, [i["loc"] for i in r.json()["detail"]]) == (422, [loc])


def test_the_mean_of_the_largest_metric_values_is_finite(server: Any, http: httpx.Client) -> None:
    """The mean of two ``1.7976931348623157e308`` is that number (the naive sum overflowed to a
    ``null`` the wire type rejects), and the client parses the answer."""
    model_id = create_model(http)["id"]
    big = {"reward": 1.0, "metrics": {"m": 1.7976931348623157e308}}
    body = {"split": "val", "trajectory_groups": [{"trajectories": [big, big]}]}
    r = http.post(f"/v1/preview/models/{model_id}/log", json=body)
    assert r.status_code == 200, r.text
    assert r.json()["metrics"]["val/m"] == 1.7976931348623157e308
    result = server.client().models.log(model_id, **body)
    assert result.metrics is not None and result.metrics["val/m"] == 1.7976931348623157e308
