"""Data survives a server restart on the same data folder."""

from __future__ import annotations

from typing import Any

BUILTIN_NAME = "toolkit/tiny-chat-1m"
TRAIN = b'{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}\n'


def snapshot(srv: Any, model_id: str, artifact_id: str, other_key: str) -> dict[str, Any]:
    with srv.http() as http, srv.http(other_key) as theirs:
        return {
            "model": http.get(f"/v1/preview/models/{model_id}").json(),
            "checkpoints": http.get(f"/v1/preview/models/{model_id}/checkpoints").json(),
            "trajectories": http.get(f"/v1/preview/models/{model_id}/trajectories").json(),
            "artifact": http.get(f"/v1/preview/artifacts/{artifact_id}").json(),
            "foreign": theirs.get(f"/v1/preview/models/{model_id}").status_code,
            "theirs": theirs.get("/v1/preview/models").json(),
        }


def test_data_survives_a_restart(fresh_server: Any) -> None:
    srv = fresh_server
    other_key = srv.new_user_key("someone-else")
    with srv.http() as http:
        model = http.post(
            "/v1/preview/models", json={"project": "p", "name": "durable", "base_model": BUILTIN_NAME}
        ).json()
        logged = http.post(
            f"/v1/preview/models/{model['id']}/log",
            json={
                "split": "val",
                "trajectory_groups": [{"trajectories": [{"reward": 1.0}, {"reward": 0.0}]}],
            },
        )
        assert logged.status_code == 200
        artifact = http.post(
            "/v1/preview/artifacts",
            data={"project": "p", "name": "data"},
            files=[("files", ("train.jsonl", TRAIN))],
        ).json()
    before = snapshot(srv, model["id"], artifact["id"], other_key)
    assert before["checkpoints"]["data"][0]["metrics"]["val/reward"] == 0.5
    assert len(before["trajectories"]) == 2
    assert (before["foreign"], before["theirs"]) == (404, [])
    old_key = srv.key

    srv.restart()
    assert srv.key == old_key  # the local key is kept in the data folder
    assert snapshot(srv, model["id"], artifact["id"], other_key) == before

    with srv.http() as http:
        again = http.post(
            "/v1/preview/models",
            json={"project": "p", "name": "durable", "base_model": BUILTIN_NAME, "return_existing": True},
        )
        assert again.json() == model
        conflict = http.post(
            "/v1/preview/models", json={"project": "p", "name": "durable", "base_model": BUILTIN_NAME}
        )
        assert conflict.status_code == 409
        logged = http.post(
            f"/v1/preview/models/{model['id']}/log",
            json={"split": "val", "trajectory_groups": [{"trajectories": [{"reward": 0.5}]}]},
        )
        metrics = logged.json()["metrics"]
        assert (metrics["val/reward"], metrics["val/num_trajectories"]) == (0.5, 3.0)
        second = http.post(
            "/v1/preview/artifacts",
            data={"project": "p", "name": "data"},
            files=[("files", ("train.jsonl", TRAIN))],
        ).json()
        assert second["url"] == "wandb-artifact:///local/p/data:v1"
        assert http.get("/v1/system-check").status_code == 200
