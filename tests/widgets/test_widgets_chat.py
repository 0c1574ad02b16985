"""ChatCompare against the real chat endpoint: streamed columns, usage, latency, n samples, diff, logprobs."""

from __future__ import annotations

import math
import re

from support.widget_support import base_model, group, new_model
from toolkit import _theme
from toolkit.plots import probability_color
from toolkit.types.training import TokenLogprob
from toolkit.widgets import ChatCompare
from toolkit.widgets.chat_column import diff_html, logprob_html


def test_diff_html_marks_words() -> None:
    out = diff_html("the cat sat", "the dog sat down")
    assert re.search(r"<del style=\"background:[^\"]*var\(--jp-error-color1[^\"]*\">cat</del>", out)
    assert ">dog</ins>" in out and "down</ins>" in out and _theme.SUCCESS in out
    assert diff_html("same <b>", "same <b>") == "same &lt;b&gt;"


def rgb(css: str) -> tuple[int, ...]:
    return tuple(int(v) for v in re.findall(r"\d+", css))


def test_logprob_html_uses_one_fixed_probability_scale() -> None:
    tokens = [
        TokenLogprob(token=t, logprob=lp) for t, lp in [("<a>", 0.0), ("b", math.log(0.5)), ("c", -4.4)]
    ]
    out = logprob_html(tokens)
    colours = re.findall(r"background:(rgb\([^)]*\));color:black", out)
    assert colours == [probability_color(0.0), probability_color(math.log(0.5)), probability_color(-4.4)]
    assert "&lt;a&gt;" in out and 'title="logprob -4.400"' in out
    certain, even, unlikely = (rgb(c) for c in colours)
    assert certain[1] > certain[0]  # green
    assert unlikely[0] > 200 and unlikely[1] < 130  # -4.4 (p = 0.012) is red, not green
    assert even[0] > 240 and even[1] > 200  # p = 0.5 is yellow
    # the same logprob gets the same colour in any strip (no rescaling to the strip's range)
    assert logprob_html(tokens[2:]) == out[out.index("<span", 1 + out.index("<span", 1)) :]


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
    assert compare.status_line.text == "done: 3 model(s)" and not compare.running
    assert compare.run_settings["models"] == models and compare.run_settings["params"]["n"] == 2
    compare.view.value = "diff"
    first, second = (columns[m].texts for m in models[:2])
    assert all(diff_html(first[i], second[i]) in compare.area.children[1].value for i in (0, 1))
    compare.view.value = "logprobs"
    tokens = columns[models[0]].tokens[0]
    assert logprob_html(tokens) in compare.area.children[0].value
