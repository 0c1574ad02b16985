"""Engine pieces without HTTP: forward pass, sampling pipeline, structured outputs, decoding, prefix keys."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from outlines_core import Guide

from toolkit.server.engine import output
from toolkit.server.engine.codec import Codec, IncrementalText
from toolkit.server.engine.kv_pool import BLOCK, KVPool, block_keys
from toolkit.server.engine.model import ensure_builtin, load_model
from toolkit.server.engine.runner import Runner
from toolkit.server.engine.sampling import SamplingParams, sample
from toolkit.server.engine.structured import Compiler, ConstraintError, grammar_regex, regex_for
from toolkit.server.engine.template import TemplateError, render_chat
from toolkit.server.engine.tokenizer import CHATML_TEMPLATE

V = 260


class Row:
    """A minimal :class:`RowState`."""

    def __init__(
        self, params: SamplingParams, output: list[int] | None = None, seed: int | None = None
    ) -> None:
        self.params = params
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None
        self.prompt_ids = [1, 2, 3]
        self.output_ids = output or []
        self.stop_ids = frozenset({257})
        self.grammar_mask: torch.Tensor | None = None


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    return ensure_builtin(tmp_path_factory.mktemp("engine"))


def fallback() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def test_runner_matches_transformers_forward(spec) -> None:  # type: ignore[no-untyped-def]
    model = load_model(spec)
    runner = Runner(model, spec.max_model_len)
    pool = KVPool(runner.kv_shape, runner.device, 1 << 22)
    prompt = [256, 117, 115, 101, 114, 10, 104, 105, 257, 10, 256, 97]
    with torch.no_grad():
        reference = model(torch.tensor([[*prompt, 65, 66]])).logits[0]
    table: list[int] = []
    assert pool.grow(table, len(prompt))
    last, [full] = runner.prefill(pool, [table], [prompt], [0], [True])
    assert full is not None and torch.allclose(runner.logits(full), reference[: len(prompt)], atol=1e-4)
    assert torch.allclose(last[0], reference[len(prompt) - 1], atol=1e-4)
    second = pool.fork(table)  # a second row sharing the prompt's block (n > 1): written to, it is copied
    for step, token in enumerate((65, 66)):
        at = len(prompt) + step
        assert all(pool.writable(t, at) for t in (table, second))
        logits = runner.decode(pool, [table, second], [token, token], [at, at])
        assert torch.allclose(logits[0], reference[at], atol=1e-4)
        assert torch.allclose(logits[1], reference[at], atol=1e-4)
    assert table != second and pool.in_use == 2


def test_batched_prefill_of_different_lengths_and_cached_prefixes(spec) -> None:  # type: ignore[no-untyped-def]
    model = load_model(spec)
    runner = Runner(model, spec.max_model_len)
    pool = KVPool(runner.kv_shape, runner.device, 1 << 22)
    tables: list[list[int]] = [[], [], []]
    long, short = list(range(60, 90)), [256, 65, 66, 67]
    assert pool.grow(tables[2], 16)
    runner.prefill(pool, [tables[2]], [long[:16]], [0])  # row 2 already holds the first 16 tokens of ``long``
    assert pool.grow(tables[1], len(short)) and pool.grow(tables[2], len(long))
    last, _ = runner.prefill(pool, tables[1:], [short, long[16:]], [0, 16])
    with torch.no_grad():
        assert torch.allclose(last[0], model(torch.tensor([short])).logits[0, -1], atol=1e-4)
        assert torch.allclose(last[1], model(torch.tensor([long])).logits[0, -1], atol=1e-4)
    positions = [0, len(short), len(long)]
    assert all(pool.writable(t, at) for t, at in zip(tables, positions, strict=True))
    step = runner.decode(pool, tables, [0, 1, 2], positions)
    with torch.no_grad():
        assert torch.allclose(step[1], model(torch.tensor([[*short, 1]])).logits[0, -1], atol=1e-4)
        assert torch.allclose(step[2], model(torch.tensor([[*long, 2]])).logits[0, -1], atol=1e-4)


def test_greedy_takes_argmax_and_reports_raw_logprobs() -> None:
    logits = torch.randn(2, V)
    rows = [Row(SamplingParams(max_tokens=1, temperature=0.0, logprobs=3)) for _ in range(2)]
    result = sample(logits.clone(), rows, fallback())
    assert result.tokens == logits.argmax(-1).tolist()
    raw = logits.log_softmax(-1)
    assert result.logprobs == pytest.approx(raw.max(-1).values.tolist(), abs=1e-5)
    assert result.top is not None
    assert [v for _, v in result.top[0]] == sorted((v for _, v in result.top[0]), reverse=True)


def test_same_seed_same_tokens_and_different_seed_differs() -> None:
    logits = torch.zeros(1, V)
    params = SamplingParams(max_tokens=1, temperature=1.0)

    def draws(seed: int) -> list[int]:
        row = Row(params, seed=seed)
        return [sample(logits.clone(), [row], fallback()).tokens[0] for _ in range(8)]

    assert draws(7) == draws(7)
    assert draws(7) != draws(8)


def test_allowed_token_ids_bias_and_bad_words() -> None:
    logits = torch.zeros(1, V)
    allowed = SamplingParams(max_tokens=1, temperature=1.0, allowed_token_ids=[65, 66])
    assert {sample(logits.clone(), [Row(allowed, seed=s)], fallback()).tokens[0] for s in range(30)} <= {
        65,
        66,
    }
    biased = SamplingParams(max_tokens=1, temperature=0.0, logit_bias={70: 100.0})
    assert sample(torch.randn(1, V), [Row(biased)], fallback()).tokens == [70]
    # "ab" banned: after "a" (97) the "b" (98) is masked; a single-token bad word is always masked
    bad = SamplingParams(max_tokens=1, temperature=0.0, bad_words_ids=[[97, 98], [99]])
    row_logits = torch.zeros(1, V)
    row_logits[0, 98], row_logits[0, 99] = 10.0, 9.0
    out = sample(row_logits.clone(), [Row(bad, output=[97])], fallback()).tokens[0]
    assert out not in (98, 99)
    assert sample(row_logits.clone(), [Row(bad, output=[1])], fallback()).tokens == [98]


def test_min_tokens_holds_back_stop_ids_and_penalties_apply() -> None:
    logits = torch.zeros(1, V)
    logits[0, 257] = 50.0
    held = SamplingParams(max_tokens=5, temperature=0.0, min_tokens=2)
    assert sample(logits.clone(), [Row(held, output=[5])], fallback()).tokens[0] != 257
    assert sample(logits.clone(), [Row(held, output=[5, 6])], fallback()).tokens[0] == 257
    logits = torch.zeros(1, V)
    logits[0, 10], logits[0, 11] = 1.0, 0.9
    fresh = SamplingParams(max_tokens=5, temperature=0.0, presence_penalty=0.5)
    assert sample(logits.clone(), [Row(fresh, output=[10])], fallback()).tokens == [11]
    rep = SamplingParams(max_tokens=5, temperature=0.0, repetition_penalty=2.0)
    assert sample(logits.clone(), [Row(rep, output=[10])], fallback()).tokens == [11]


def test_top_k_top_p_min_p_restrict_the_support() -> None:
    logits = torch.arange(V, dtype=torch.float32)[None] / 10
    top_k = SamplingParams(max_tokens=1, top_k=3)
    assert {sample(logits.clone(), [Row(top_k, seed=s)], fallback()).tokens[0] for s in range(40)} <= {
        257,
        258,
        259,
    }
    peaked = torch.full((1, V), -10.0)
    peaked[0, 5], peaked[0, 6] = 5.0, 4.0
    top_p = SamplingParams(max_tokens=1, top_p=0.5)
    assert {sample(peaked.clone(), [Row(top_p, seed=s)], fallback()).tokens[0] for s in range(40)} == {5}
    min_p = SamplingParams(max_tokens=1, min_p=0.5)
    assert {sample(peaked.clone(), [Row(min_p, seed=s)], fallback()).tokens[0] for s in range(40)} == {5}


def test_structured_guides_allow_only_matching_text(spec) -> None:  # type: ignore[no-untyped-def]
    codec = Codec.from_folder(spec.folder)
    compiler = Compiler(codec, spec.eos_token_ids[0])
    index = compiler.index(regex_for("choice", ["yes", "no"]))
    guide = Guide(index)
    assert sorted(guide.get_tokens()) == [ord("n"), ord("y")]
    for b in b"no":
        guide.advance(b)
    assert guide.get_tokens() == [spec.eos_token_ids[0]]
    with pytest.raises(ConstraintError):
        compiler.index("(unclosed")
    compiler.close()


def test_grammar_to_regex_and_recursion_refused() -> None:
    grammar = 'root ::= greeting " " name\ngreeting ::= "hi" | "hello"\nname ::= [a-z]+'
    pattern = re.compile(grammar_regex(grammar))
    assert pattern.fullmatch("hello bob") and not pattern.fullmatch("hey bob")
    with pytest.raises(ConstraintError, match="Recursive"):
        grammar_regex('root ::= "(" root ")" | "x"')


def test_incremental_text_equals_full_decode(spec) -> None:  # type: ignore[no-untyped-def]
    codec = Codec.from_folder(spec.folder)
    ids = codec.encode("héllo wörld ✓ done")
    inc = IncrementalText(codec)
    text = "".join(inc.push(i) for i in ids) + inc.flush()
    assert text == codec.decode(ids) == "héllo wörld ✓ done"
    assert codec.token_text(ids[1]) == ""  # the first byte of "é" alone
    assert codec.token_text(ids[2], ids[:2]) == "é"


def test_prefix_keys_depend_on_scope_and_prefix() -> None:
    tokens = list(range(3 * BLOCK + 5))
    a = block_keys("w|user|salt", tokens)
    assert len(a) == 3
    assert block_keys("w|user|salt", tokens[: 2 * BLOCK]) == a[:2]
    assert not set(a) & set(block_keys("w|user|other", tokens))
    assert not set(a) & set(block_keys("w|someone|salt", tokens))


def test_template_sandbox_and_continue_final_message() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hel"}]
    text = render_chat(CHATML_TEMPLATE, messages, add_generation_prompt=False, continue_final_message=True)
    assert text.endswith("<|im_start|>assistant\nHel")
    with pytest.raises(TemplateError):
        render_chat(
            "{{ ''.__class__.__mro__ }}", messages, add_generation_prompt=True, continue_final_message=False
        )
    with pytest.raises(TemplateError, match="not compatible"):
        render_chat(CHATML_TEMPLATE, messages, add_generation_prompt=True, continue_final_message=True)


def test_codec_token_bytes_cover_the_byte_vocabulary(spec) -> None:  # type: ignore[no-untyped-def]
    codec = Codec.from_folder(Path(spec.folder))
    assert sorted(codec.token_bytes) == [bytes([b]) for b in range(256)]


# no autograd graph over the prompt's logits (torch warns when a value that requires grad is read)
@pytest.mark.filterwarnings("error::UserWarning")
def test_prompt_logprobs_in_chunks_of_positions_are_those_of_the_whole_prompt(
    spec, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    runner = Runner(load_model(spec), spec.max_model_len)
    pool = KVPool(runner.kv_shape, runner.device, 1 << 22)
    prompt = [256, *range(60, 100), 257]
    table: list[int] = []
    assert pool.grow(table, len(prompt))
    _, [hidden] = runner.prefill(pool, [table], [prompt], [0], [True])
    assert hidden is not None
    whole = output.prompt_logprobs(runner.logits, hidden, prompt, 3)
    monkeypatch.setattr(output, "LOGPROB_ROWS", 7)  # 41 positions: 6 chunks, the last one short
    chunked = output.prompt_logprobs(runner.logits, hidden, prompt, 3)
    assert [p.token_id for p in whole] == [p.token_id for p in chunked] == prompt[1:]
    assert [p.rank for p in whole] == [p.rank for p in chunked]
    assert [[t for t, _ in p.top] for p in whole] == [[t for t, _ in p.top] for p in chunked]
    values = [[p.logprob, *(v for _, v in p.top)] for p in (*whole, *chunked)]
    assert torch.allclose(torch.tensor(values[: len(whole)]), torch.tensor(values[len(whole) :]), atol=1e-5)
