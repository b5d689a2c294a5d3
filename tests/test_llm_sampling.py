"""llm.sample: K samples of one context, decoded together by the embedded model; n=K through litellm and serve-local."""
from __future__ import annotations

import litellm
import numpy as np
import pytest
from tests.test_llm_local import LONG_CONVERSATION, QUESTION, TOOLS, assert_rows_match

from agentuq_nb import llm
from agentuq_nb.llm import client
from agentuq_nb.llm.local_model import LocalModel
from agentuq_nb.llm.local_provider import chat_completion, chat_samples
from agentuq_nb.llm.request import GenerationRequest

from conftest import serving_in_thread

K = 4
SEED = 7


def assert_same_generation(a: llm.Generation, b: llm.Generation) -> None:
    assert a.message == b.message
    assert a.finish_reason == b.finish_reason
    assert_rows_match(a.tokens, b.tokens)


@pytest.fixture(scope="module")
def text_samples():
    return llm.sample(QUESTION, k=K, seed=SEED, temperature=1.0, max_tokens=24)


@pytest.fixture(scope="module")
def tool_samples():
    return llm.sample(QUESTION, k=K, seed=SEED, tools=TOOLS, tool_choice="required", temperature=1.0, max_tokens=48)


def test_batched_text_samples_equal_sequential_generate_with_seed_plus_i(text_samples):
    assert len(text_samples) == K
    for i, got in enumerate(text_samples):
        assert_same_generation(got, llm.generate(QUESTION, temperature=1.0, seed=SEED + i, max_tokens=24))
        assert got.tokens and got.usage["completion_tokens"] == len(got.tokens)
        assert got.usage["choices_in_request"] == K and got.cost == 0.0


def test_different_seeds_give_different_samples_at_temperature_one(text_samples):
    assert len({g.message["content"] for g in text_samples}) >= 2


@pytest.mark.slow
def test_batched_tool_call_samples_equal_sequential_generate_and_teacher_forcing(tool_samples):
    assert all(g.message["tool_calls"] for g in tool_samples)
    for i, got in enumerate(tool_samples):
        again = llm.generate(QUESTION, tools=TOOLS, tool_choice="required", temperature=1.0, seed=SEED + i,
                             max_tokens=48)
        assert_same_generation(got, again)
        assert_rows_match(llm.score(QUESTION, got.message, tools=TOOLS), got.tokens)


def test_text_sample_logprobs_equal_teacher_forced_scores(text_samples):
    for got in text_samples:
        assert_rows_match(llm.score(QUESTION, got.message), got.tokens)


@pytest.mark.slow
def test_samples_that_stop_early_or_open_a_call_stay_exact_beside_the_others():
    """Tools offered (not forced), more samples than one batch holds: some stop early, some may call a
    tool; the live sequences are compacted as others finish. Each equals its sequential twin."""
    from agentuq_nb.llm.local_sampling import MAX_PARALLEL

    n = MAX_PARALLEL + 2
    batched = chat_samples(QUESTION, n, GenerationRequest(tools=TOOLS, temperature=1.5, seed=3, max_tokens=20, top_logprobs=3))
    lengths = {len(r.tokens) for r in batched}
    assert len(lengths) > 1  # the samples finished at different steps
    for i, got in enumerate(batched):
        want = chat_completion(QUESTION, GenerationRequest(tools=TOOLS, temperature=1.5, seed=3 + i, max_tokens=20,
                                                       top_logprobs=3))
        assert (got.content, got.tool_calls, got.finish_reason) == (want.content, want.tool_calls, want.finish_reason)
        assert [t.token for t in got.tokens] == [t.token for t in want.tokens]
        assert np.allclose([t.logprob for t in got.tokens], [t.logprob for t in want.tokens], atol=1e-3)


def test_k_of_one_is_generate():
    (got,) = llm.sample(QUESTION, k=1, seed=11, temperature=1.0, max_tokens=12)
    assert_same_generation(got, llm.generate(QUESTION, temperature=1.0, seed=11, max_tokens=12))


def test_n_through_litellm_returns_k_choices_and_counts_the_prompt_once():
    request = dict(model=llm.LOCAL_MODEL, messages=QUESTION, temperature=1.0, seed=SEED, max_tokens=10,
                   logprobs=True, top_logprobs=2)
    one = litellm.completion(**request)
    many = litellm.completion(n=3, **request)
    assert [c.index for c in many.choices] == [0, 1, 2]
    assert many.choices[0].message.content == one.choices[0].message.content
    assert many.usage.prompt_tokens == one.usage.prompt_tokens
    assert many.usage.completion_tokens == sum(len(c.logprobs.content) for c in many.choices)


@pytest.mark.parametrize("k", [0, -1, 2.0, True])
def test_a_bad_k_is_a_clear_error(k):
    with pytest.raises(ValueError, match="k"):
        llm.sample(QUESTION, k=k)


def test_a_context_over_the_window_raises_as_generate_does_and_fit_context_drops_turns():
    small = LocalModel(n_ctx=512)  # the window test_llm_local overflows with LONG_CONVERSATION (~600 tokens)
    try:
        with pytest.raises(llm.ContextWindowError):
            chat_samples(LONG_CONVERSATION, 3, GenerationRequest(max_tokens=16, seed=0), model=small)
        fitted = chat_samples(LONG_CONVERSATION, 3, GenerationRequest(max_tokens=16, seed=0, fit_context=True), model=small)
        single = chat_completion(LONG_CONVERSATION, GenerationRequest(max_tokens=16, seed=1, fit_context=True), model=small)
        assert all(r.dropped_messages > 0 for r in fitted)
        assert (fitted[1].content, fitted[1].tool_calls) == (single.content, single.tool_calls)
    finally:
        small.close()
    with pytest.raises(litellm.ContextWindowExceededError):
        llm.sample(LONG_CONVERSATION * 24, k=2, max_tokens=16)  # ~14k tokens: over the 135M model's 8,192


def test_a_remote_text_answer_without_logprobs_is_kept_with_empty_rows(monkeypatch):
    monkeypatch.setattr(client, "supports_n", lambda model: False)  # one request per sample
    request = dict(model="openai/gpt-4.1", api_key="not-needed", mock_response="A reply with no log-probs.")
    got = llm.sample(QUESTION, k=2, **request)
    assert [g.message["content"] for g in got] == ["A reply with no log-probs."] * 2
    assert all(g.tokens == [] for g in got)
    with pytest.raises(llm.MissingLogprobsError):  # generate keeps its strictness
        llm.generate(QUESTION, **request)


@pytest.fixture(scope="module")
def base_url():
    with serving_in_thread() as (url, _, _):
        yield url


@pytest.mark.parametrize("one_request", [True, False], ids=["n=k", "concurrent"])
def test_samples_from_serve_local_through_litellm_equal_the_embedded_ones(base_url, text_samples, monkeypatch,
                                                                            one_request):
    if not one_request:
        monkeypatch.setattr(client, "supports_n", lambda model: False)
    remote = f"openai/{llm.LOCAL_MODEL}"
    assert llm.supports_n(remote)
    got = llm.sample(QUESTION, k=K, model=remote, seed=SEED, temperature=1.0, max_tokens=24,
                     api_base=base_url, api_key="not-needed")
    assert [g.message["content"] for g in got] == [g.message["content"] for g in text_samples]
    for g, local in zip(got, text_samples):
        assert [r["token"] for r in g.tokens] == [r["token"] for r in local.tokens]
        assert np.allclose([r["chosen_logprob"] for r in g.tokens], [r["chosen_logprob"] for r in local.tokens],
                           atol=1e-3)
        assert ("choices_in_request" in g.usage) == one_request
