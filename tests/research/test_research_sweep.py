"""Seeds swept: ``tk.research.sweep``, the t-interval band of ``tk.plots.mean_band`` and ``RunCompare``
over configs of several seeds; unit tests on the figure objects and widget state (the table's
interval is the band's, clipped alike), then a sweep of a tiny RL recipe (3 seeds, 2 RL steps each)
over HTTP against the real local server, its metrics under the checkpoints' names."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import pytest

import toolkit as tk
from conftest import LocalServer
from support.tracking_helpers import RANDOM_BASE, new_model, rl_steps
from toolkit import seeding
from toolkit._stats import mean_interval, t_quantile
from toolkit.research.sweep import ci_column, long_frame, mean_ci_table
from toolkit.rollouts import gather
from toolkit.tasks import reverse

T95 = {1: 12.7062, 2: 4.302653, 3: 3.1824, 4: 2.7764, 9: 2.2622, 30: 2.0423}  # Student t tables


def shifted(offset: float) -> Callable[[int], pd.DataFrame]:
    """A recipe whose reward at step s is ``offset + 0.1 s`` plus noise of its seed, in [0, 1]."""

    def recipe(seed: int) -> pd.DataFrame:
        noise = np.random.default_rng(seed).uniform(-0.1, 0.1, 3)
        steps = np.arange(1, 4)
        reward = offset + 0.1 * steps + noise
        return pd.DataFrame({"step": steps, "reward": reward, "reward_min": 0.0, "reward_max": 1.0})

    return recipe


def test_t_quantiles_match_the_tables() -> None:
    for df, t in T95.items():
        assert t_quantile(0.95, df) == pytest.approx(t, abs=1e-3)
    assert t_quantile(0.99, 2) == pytest.approx(9.9248, abs=1e-3)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_mean_interval_is_the_t_interval_and_none_for_one_value() -> None:
    mean, half, n = mean_interval([1.0, 2.0, 4.0, math.nan])
    assert (mean, n) == (pytest.approx(7 / 3), 3)
    assert half == pytest.approx(T95[2] * np.std([1, 2, 4], ddof=1) / math.sqrt(3), rel=1e-6)
    assert math.isnan(mean_interval([3.0])[1])


def test_long_frame_takes_wide_and_long_frames() -> None:
    wide = pd.DataFrame({"step": [1, 2], "reward": [0.5, 0.7], "note": ["a", "b"], "rl_step": [1, 2]})
    rows = long_frame(wide, seed=4)
    assert rows.to_dict("records") == [
        {"seed": 4, "step": 1, "metric": "reward", "value": 0.5},
        {"seed": 4, "step": 2, "metric": "reward", "value": 0.7},
    ]
    long = pd.DataFrame({"step": [1], "metric": ["loss"], "value": [2.0]})
    assert long_frame(long, seed=1)[["metric", "value"]].values.tolist() == [["loss", 2.0]]
    with pytest.raises(ValueError, match="'step' column"):
        long_frame(pd.DataFrame({"reward": [1.0]}), seed=0)


def test_sweep_runs_each_seed_and_summarises_the_final_step() -> None:
    seen: list[int] = []

    def recipe(seed: int) -> pd.DataFrame:
        seen.append(seed)
        return shifted(0.2)(seed)

    result = tk.research.sweep(recipe, seeds=[3, 5, 8])
    assert seen == [3, 5, 8] and result.seeds == [3, 5, 8]
    assert result.metrics == ["reward", "reward_max", "reward_min"]
    finals = [float(shifted(0.2)(s)["reward"].iloc[-1]) for s in (3, 5, 8)]
    summary = result.summary("reward")
    assert summary["step"] == 3 and summary["n"] == 3
    assert summary["mean"] == pytest.approx(np.mean(finals))
    half = T95[2] * np.std(finals, ddof=1) / math.sqrt(3)
    assert (summary["ci_low"], summary["ci_high"]) == (
        pytest.approx(np.mean(finals) - half),
        pytest.approx(np.mean(finals) + half),
    )
    assert list(result.table()["metric"]) == result.metrics
    assert "95% t-interval" in result._repr_html_()
    assert repr(result) == "SweepResult(seeds [3, 5, 8], 3 metrics, 27 rows)"
    with pytest.raises(TypeError, match="DataFrame or a model id"):
        tk.research.sweep(lambda seed: 42, seeds=[1])  # type: ignore[arg-type,return-value]
    with pytest.raises(ValueError):
        tk.research.sweep(recipe, seeds=[])


def test_a_recipes_unseeded_gather_takes_the_sweeps_seed(server: LocalServer) -> None:
    """Each seed is the default seed while its recipe runs: a ``gather`` given no seed samples the
    same tokens for the same seed and other tokens for another seed."""
    rollout = reverse.rollout(server.client(), RANDOM_BASE)  # random-init: spread-out samples
    sampled: list[list[list[int]]] = []

    def recipe(seed: int) -> pd.DataFrame:
        groups = gather(["cat", "dog"], rollout, group_size=2, progress=False)
        sampled.append([list(c.token_ids or []) for g in groups for t in g.trajectories for c in t.choices()])
        return pd.DataFrame({"step": [1], "reward": [float(seed)]})

    tk.research.sweep(recipe, seeds=[4, 4, 5])
    first, again, other = sampled
    assert len(first) == 4 and all(first)
    assert first == again != other


def test_the_seed_is_the_default_seed_of_what_the_recipe_leaves_unseeded() -> None:
    """Words drawn without a seed are the same for a seed swept twice and others for another seed;
    outside the sweep no default seed is open."""
    drawn: list[list[str]] = []

    def recipe(seed: int) -> pd.DataFrame:
        drawn.append(reverse.sample_words(4))  # no seed: the sweep's decides
        return pd.DataFrame({"step": [1], "default": [seeding.default_seed()]})

    result = tk.research.sweep(recipe, seeds=[7, 9, 7])
    assert result.frame["value"].tolist() == [7, 9, 7]
    assert drawn[0] == drawn[2] != drawn[1]
    assert seeding.default_seed() is None


def bands(fig: go.Figure) -> list[go.Scatter]:
    return [t for t in fig.data if t.fill == "toself"]


def test_mean_band_draws_the_mean_its_clipped_t_interval_and_each_seed() -> None:
    result = tk.research.sweep(shifted(0.75), seeds=[0, 1, 2])
    fig = tk.plots.mean_band(result.frame, "reward")
    assert fig.layout.title.text == "reward: mean over 3 seeds, 95% t-interval"
    (band,) = bands(fig)
    means = [t for t in fig.data if t.name == "reward"]
    seeds = [t for t in fig.data if t.name and " seed " in t.name]
    assert len(means) == 1 and len(seeds) == 3
    per_step = result.frame[result.frame["metric"] == "reward"].pivot(
        index="step", columns="seed", values="value"
    )
    np.testing.assert_allclose(means[0].y, per_step.mean(axis=1))
    half = T95[2] * per_step.std(axis=1, ddof=1) / math.sqrt(3)
    upper, lower = np.split(np.asarray(band.y), 2)
    np.testing.assert_allclose(upper, np.minimum(per_step.mean(axis=1) + half, 1.0))  # clipped at reward_max
    np.testing.assert_allclose(lower[::-1], np.maximum(per_step.mean(axis=1) - half, 0.0))
    assert upper.max() == 1.0  # the raw interval goes past 1 at the last step: the band stops at 1
    assert "95% CI" in means[0].hovertemplate and list(means[0].customdata[:, 2]) == [3, 3, 3]
    assert list(fig.layout.xaxis.range) == [0.5, 3.5] and fig.layout.xaxis.dtick == 1


def test_mean_band_by_config_and_one_seed_has_no_band() -> None:
    sweeps = {"a": tk.research.sweep(shifted(0.1), [0, 1]), "b": tk.research.sweep(shifted(0.5), [0, 1])}
    fig = tk.plots.mean_band(tk.research.combine(sweeps), "reward", by="config", seeds=False, level=0.9)
    assert [t.name for t in fig.data if t.fill != "toself"] == ["a", "b"]
    assert len(bands(fig)) == 2 and "90% t-interval" in fig.layout.title.text
    alone = tk.plots.mean_band(tk.research.sweep(shifted(0.1), [0]).frame, "reward")
    assert bands(alone) == [] and "over 1 seeds" in alone.layout.title.text


def test_run_compare_of_configs_over_seeds() -> None:
    sweeps = {
        "low": tk.research.sweep(shifted(0.1), [0, 1, 2]),
        "high": tk.research.sweep(shifted(0.5), [0, 1, 2]),
    }
    compare = tk.widgets.RunCompare(None, configs=sweeps, metric="reward")  # type: ignore[arg-type]
    compare.load()
    assert compare.names == ["low", "high"] and compare.runs == []
    table = compare.seed_summary
    assert list(table["config"]) == ["low", "high"] and set(table["step"]) == {3} and set(table["n"]) == {3}
    expected = mean_ci_table(sweeps, "reward")
    assert list(table[ci_column(0.95)]) == list(expected[ci_column(0.95)])
    assert table["mean"].iloc[1] - table["mean"].iloc[0] == pytest.approx(0.4, abs=0.1)
    assert "low" in compare.seed_table.value and "mean [95% CI]" in compare.seed_table.value
    assert len(bands(compare.reward_plot.figure)) == 2
    assert compare.summary().startswith("RunCompare over seeds: reward at step 3: low ")
    compare.metric.value = "reward_max"
    assert compare.seed_summary["metric"].iloc[0] == "reward_max"
    assert "t-interval" in compare.snapshot_html()
    early = tk.widgets.RunCompare(None, configs=sweeps, metric="reward", ci_step=1)  # type: ignore[arg-type]
    early.load()
    assert set(early.seed_summary["step"]) == {1}
    compare.close()
    early.close()
    both = tk.widgets.RunCompare(None, models=["m"], configs=sweeps)  # type: ignore[arg-type]
    alone = tk.widgets.RunCompare(None, configs={"low": sweeps["low"]})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not both"):
        both.load()
    with pytest.raises(ValueError, match="2 to 4 configs, not 1"):
        alone.load()
    both.close()
    alone.close()


NEAR_EDGES = {  # per seed: a reward near its observed max of 1, an entropy and a token count near 0
    0: {"train/reward": 0.80, "reward_max": 1.0, "loss/entropy": 0.01, "data/step_num_tokens": 5.0},
    1: {"train/reward": 0.99, "reward_max": 1.0, "loss/entropy": 0.20, "data/step_num_tokens": 200.0},
    2: {"train/reward": 1.00, "reward_max": 1.0, "loss/entropy": 0.02, "data/step_num_tokens": 10.0},
}


def near_edges(seed: int) -> pd.DataFrame:
    return pd.DataFrame([{"step": 1, **NEAR_EDGES[seed % 3]}])


def band_at(fig: go.Figure, step: int) -> tuple[float, float]:
    """(low, high) of a mean band's area at ``step``."""
    (band,) = bands(fig)
    x, y = np.asarray(band.x, dtype=float), np.asarray(band.y, dtype=float)
    at = np.flatnonzero(x == step)
    return float(y[at].min()), float(y[at].max())


def test_the_tables_interval_is_the_bands_clipped_where_the_band_is() -> None:
    """Three seeds' t-intervals reach past 1 (a reward seen at most 1) and below 0 (an entropy, a
    token count): the summary, the config table and the figure stop at the same edges."""
    result = tk.research.sweep(near_edges, seeds=[0, 1, 2])
    crossing = {"train/reward": "ci_high", "loss/entropy": "ci_low", "data/step_num_tokens": "ci_low"}
    for metric, edge in crossing.items():
        values = [NEAR_EDGES[s][metric] for s in (0, 1, 2)]
        mean, half, _ = mean_interval(values)
        assert mean + half > 1.0 if edge == "ci_high" else mean - half < 0.0  # the raw interval crosses
        row = result.summary(metric)
        assert row[edge] == (1.0 if edge == "ci_high" else 0.0)
        assert (row["ci_low"], row["ci_high"]) == pytest.approx(band_at(result.figure(metric), 1))
        table = mean_ci_table({"a": result, "b": result}, metric)
        assert list(table["ci_low"]) == [row["ci_low"]] * 2 and list(table["ci_high"]) == [row["ci_high"]] * 2
        assert table[ci_column(0.95)].iloc[0] == f"{mean:.3g} [{row['ci_low']:.3g}, {row['ci_high']:.3g}]"


def test_run_compare_shows_reward_first_and_no_band_below_what_a_metric_can_take() -> None:
    sweeps = {"a": tk.research.sweep(near_edges, [0, 1, 2]), "b": tk.research.sweep(near_edges, [1, 2, 3])}
    compare = tk.widgets.RunCompare(None, configs=sweeps)  # type: ignore[arg-type]
    compare.load()
    assert compare.metric.value == compare.reward_metric == "train/reward"  # not entropy
    assert set(compare.seed_summary["metric"]) == {"train/reward"}
    compare.metric.value = "loss/entropy"
    for band in bands(compare.metric_plot.figure):
        assert min(band.y) >= 0.0
    assert min(compare.seed_summary["ci_low"]) == 0.0
    compare.close()


# ----------------------------------------------------------------------------- over the real server


def rl_recipe(client: tk.Client, learning_rate: float) -> Callable[[int], str]:
    """A tiny RL recipe: a new model, 2 RL steps of 2 words x 4 seeded samples; its model id."""

    def recipe(seed: int) -> str:
        model = new_model(client, f"sweep-s{seed}")
        rl_steps(client, model, 2, seed, learning_rate)
        return model.id

    return recipe


def test_sweep_of_a_tiny_rl_recipe_over_the_real_server(server: LocalServer) -> None:
    with server.client() as client:
        result = tk.research.sweep(rl_recipe(client, 1e-4), seeds=[0, 1, 2], client=client)
        assert sorted(result.model_ids) == [0, 1, 2] and len(set(result.model_ids.values())) == 3
        assert {"train/reward", "loss/train", "reward_min", "reward_max"} <= set(result.metrics)
        rewards = result.frame[result.frame["metric"] == "train/reward"]
        assert sorted(rewards["step"].unique()) == [1, 2] and rewards.groupby("step")[
            "seed"
        ].nunique().tolist() == [3, 3]
        for seed, model_id in result.model_ids.items():  # the sweep's values are the checkpoints' metrics
            stored = {
                c.step: c.metrics["train/reward"] for c in client.models.checkpoints.list(model_id) if c.step
            }
            mine = rewards[rewards["seed"] == seed]
            assert dict(zip(mine["step"], mine["value"], strict=True)) == stored
        fig = result.figure("train/reward")
        assert len([t for t in fig.data if " seed " in (t.name or "")]) == 3
        again = tk.research.sweep(rl_recipe(client, 1e-4), seeds=[0], client=client)  # the same seed, again
        first = rewards[rewards["seed"] == 0]["value"].tolist()
        assert again.frame[again.frame["metric"] == "train/reward"]["value"].tolist() == first
        configs = {"lr 1e-4": result, "again": list(again.model_ids.values())}
        compare = tk.widgets.RunCompare(client, configs=configs)
        compare.load()  # the default metric, reward: the checkpoints' train/reward
        assert compare.metric.value == compare.reward_metric == "train/reward"
        assert compare.seed_summary["metric"].iloc[0] == "train/reward"
        assert compare.names == ["lr 1e-4", "again"] and [r.name for r in compare.runs] == [
            "lr 1e-4",
            "again",
        ]
        assert list(compare.seed_summary["n"]) == [3, 1] and compare.seed_summary["step"].iloc[0] == 2
        assert compare.seed_summary[ci_column(0.95)].iloc[1].endswith(" [n/a]")  # one seed: no interval
        assert compare.checkpoints(2) == [f"{r.model.name}:step2" for r in compare.runs]
        compare.close()
