"""ChatCompare against the real chat endpoint: streamed columns, usage, latency, n samples, diff, logprobs."""

from __future__ import annotations

import math

from widget_support import base_model, group, new_model

from toolkit.types.training import TokenLogprob
from toolkit.widgets import ChatCompare
from toolkit.widgets.chat import diff_html, logprob_html


def test_diff_html_marks_words() -> None:
    out = diff_html("the cat sat", "the dog sat down")
    assert '<del style="background:#fdd">cat</del>' in out and ">dog</ins>" in out and "down</ins>" in out
    assert diff_html("same <b>", "same <b>") == "same &lt;b&gt;"


def test_logprob_html_colours_tokens() -> None:
    out = logprob_html(
        [TokenLogprob(token="<a>", logprob=0.0), TokenLogprob(token="b", logprob=math.log(0.5))]
    )
    assert "hsl(120,70%,85%)" in out and "hsl(60,70%,85%)" in out and "&lt;a&gt;" in out


def test_conversation_and_params() -> None:
    compare = ChatCompare(None, models=["a"], prompt="hi")  # type: ignore[arg-type]
    compare.system.value = "be brief"
    assert compare.conversation() == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    compare.n.value, compare.logprobs.value = 3, False
    params = compare.params()
    assert (
        params["n"] == 3 and "logprobs" not in params and params["stream_options"] == {"include_usage": True}
    )
    given = ChatCompare(None, messages=[{"role": "user", "content": "x"}])  # type: ignore[arg-type]
    assert given.conversation() == [{"role": "user", "content": "x"}]


def test_compare_base_and_checkpoint_side_by_side(server) -> None:
    client = server.client()
    model = new_model(client)
    client.models.log(model.id, split="val", trajectory_groups=[group([1.0])])
    models = [base_model(client), f"{model.name}:step0", "no-such-model"]
    compare = ChatCompare(client, models=models, prompt="Say hello", max_tokens=8, n=2, temperature=1.0)
    columns = compare.run(wait=True)
    assert list(columns) == models
    for name in models[:2]:
        col = columns[name]
        assert col.done and col.error is None and sorted(col.texts) == [0, 1]
        assert col.usage is not None and col.usage.completion_tokens > 0
        assert col.latency_s is not None and len(col.tokens[0]) > 0
        assert all(reason in {"stop", "length"} for reason in col.finish.values())
    assert (columns["no-such-model"].error or "").startswith("404")
    html = compare.area.children[0].value
    assert models[0] in html and "completion tokens" in html and html.count('class="sample"') == 2
    assert "404" in compare.area.children[2].value
    df = compare.frame()
    assert df["model"].tolist()[:4] == [models[0]] * 2 + [models[1]] * 2
    assert df["latency_s"].dtype == "float64" and df["completion_tokens"].dtype == "Int64"
    assert df["mean_logprob"].notna().sum() == 4
    compare.view.value = "diff"
    assert (
        "<ins" in compare.area.children[1].value
        or "<del" in compare.area.children[1].value
        or (columns[models[0]].texts == columns[models[1]].texts)
    )
    compare.view.value = "logprobs"
    assert "hsl(" in compare.area.children[0].value
