"""The LLM layer on the embedded model: determinism, exact teacher forcing, tool calls."""
from __future__ import annotations

import math

import litellm
import numpy as np
import pytest

from agentuq_nb import llm
from agentuq_nb.llm.chat_format import SMOLLM2_CHAT
from agentuq_nb.llm.local_model import LocalModel
from agentuq_nb.llm.local_scoring import score_segments
from agentuq_nb.records.tokens import DERIVED_FROM_MESSAGE, TOKEN_COLUMNS

TOL = 1e-3
TOOLS = [
    {"type": "function", "function": {
        "name": "get_order_status", "description": "Look up the status of an order by its id.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}},
    {"type": "function", "function": {
        "name": "cancel_order", "description": "Cancel an order.",
        "parameters": {"type": "object", "properties": {
            "order_id": {"type": "string"},
            "reason": {"type": "string", "enum": ["no longer needed", "ordered by mistake"]}},
            "required": ["order_id", "reason"]}}},
]
SYSTEM = "You are a customer service agent for an online shop."
QUESTION = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hi, where is my order #W4821?"}]


def logprobs(rows):
    return np.array([r["chosen_logprob"] for r in rows])


def assert_rows_match(a, b):
    assert [r["token"] for r in a] == [r["token"] for r in b]
    assert np.max(np.abs(logprobs(a) - logprobs(b)), initial=0.0) <= TOL
    for x, y in zip(a, b):
        assert x["topk_tokens"] == y["topk_tokens"]
        assert abs(x["full_entropy"] - y["full_entropy"]) <= TOL


@pytest.fixture(scope="module")
def text_turn():
    return llm.generate(QUESTION, max_tokens=24)


@pytest.fixture(scope="module")
def tool_turn():
    return llm.generate(QUESTION, tools=TOOLS, tool_choice="required", max_tokens=60)


def test_generate_twice_gives_identical_tokens_and_logprobs(text_turn):
    again = llm.generate(QUESTION, max_tokens=24)
    assert again.message == text_turn.message
    assert again.tokens == text_turn.tokens


def test_seeded_sampling_is_reproducible():
    a = llm.generate(QUESTION, max_tokens=12, temperature=1.0, seed=11)
    b = llm.generate(QUESTION, max_tokens=12, temperature=1.0, seed=11)
    assert a.tokens == b.tokens and a.message == b.message


def test_generation_rows_follow_the_token_contract(text_turn):
    rows = text_turn.tokens
    assert len(rows) == text_turn.usage["completion_tokens"] > 0
    assert "".join(r["token"] for r in rows) == text_turn.message["content"]
    for i, row in enumerate(rows):
        # every column but those derived from the whole message at extraction (the tool-call span)
        assert set(row) == set(TOKEN_COLUMNS) - set(DERIVED_FROM_MESSAGE)
        assert row["token_idx"] == i and row["source"] == "generated" and row["scorer"] == "self"
        assert row["role"] == "assistant" and row["model"] == llm.LOCAL_MODEL
        assert len(row["topk_logprobs"]) == 5 and row["topk_logprobs"] == sorted(row["topk_logprobs"], reverse=True)
        assert row["chosen_logprob"] <= 0 and row["full_entropy"] > 0
    assert text_turn.cost == 0.0
    assert "logprobs" not in text_turn.raw and text_turn.raw["message"]["content"] == text_turn.message["content"]


def test_score_reproduces_generation_time_logprobs(text_turn):
    rows = llm.score(QUESTION, text_turn.message)
    assert_rows_match(rows, text_turn.tokens)
    assert {r["source"] for r in rows} == {"teacher_forced"}
    assert {r["message_idx"] for r in rows} == {len(QUESTION)}


def test_repetitive_text_reproduces_too():
    # Repetition makes prompt-lookup drafts hit, so steps reuse logits decoded ahead.
    ask = [{"role": "user", "content": "Count: Number 1, Number 2, Number 3, Number 4, Number 5, Number 6,"}]
    turn = llm.generate(ask, max_tokens=30)
    assert_rows_match(llm.score(ask, turn.message), turn.tokens)


def test_litellm_completion_with_the_local_name_returns_top_logprobs():
    response = litellm.completion(model=llm.LOCAL_MODEL, messages=QUESTION[1:], logprobs=True, top_logprobs=5,
                                  temperature=0, max_tokens=8)
    content = response.choices[0].logprobs.content
    assert len(content) == response.usage.completion_tokens > 0
    for entry in content:
        assert len(entry.top_logprobs) == 5
        assert entry.top_logprobs[0].logprob >= entry.logprob
        assert math.isfinite(entry.logprob) and entry.logprob <= 0


def test_tool_call_request_returns_tool_calls_whose_tokens_carry_logprobs(tool_turn):
    calls = tool_turn.message["tool_calls"]
    assert tool_turn.finish_reason == "tool_calls" and len(calls) == 1
    call = calls[0]
    spec = next(t["function"] for t in TOOLS if t["function"]["name"] == call["name"])
    assert set(spec["parameters"]["required"]) <= set(call["arguments"])
    assert call["id"].startswith("call_") and call["requestor"] == "assistant"
    text = "".join(r["token"] for r in tool_turn.tokens)
    assert text.startswith("<tool_call>\n") and text.endswith("</tool_call>") and call["name"] in text
    assert all(math.isfinite(r["chosen_logprob"]) and r["topk_tokens"] for r in tool_turn.tokens)
    assert_rows_match(llm.score(QUESTION, tool_turn.message, tools=TOOLS), tool_turn.tokens)


def test_named_tool_choice_calls_that_tool():
    forced = {"type": "function", "function": {"name": "cancel_order"}}
    turn = llm.generate(QUESTION, tools=TOOLS, tool_choice=forced, max_tokens=60)
    call = turn.message["tool_calls"][0]
    assert call["name"] == "cancel_order"
    assert call["arguments"]["reason"] in ("no longer needed", "ordered by mistake")


def test_score_trajectory_agrees_with_score_message_by_message(tool_turn):
    conversation = [
        *QUESTION,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_order_status", "arguments": '{"order_id": "W4821"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"status": "shipped", "eta": "2 days"}'},
        {"role": "assistant", "content": "Your order has shipped and should arrive in two days."},
        {"role": "user", "content": "Great, thanks!"},
    ]
    scored = llm.score_trajectory(conversation, tools=TOOLS)
    assert scored.truncations == 0
    assert {r["message_idx"] for r in scored} == {1, 2, 3, 4, 5}
    for i in range(1, len(conversation)):
        ours = [r for r in scored if r["message_idx"] == i]
        assert ours and all(r["role"] == conversation[i]["role"] for r in ours)
        assert [r["token_idx"] for r in ours] == list(range(len(ours)))
        assert_rows_match(ours, llm.score(conversation[:i], conversation[i], tools=TOOLS))


def test_sliding_window_keeps_the_system_prompt_and_scores_every_token():
    small = LocalModel(n_ctx=256)
    try:
        story = " ".join(f"Step {i}: the robot mixes paint number {i}." for i in range(30))
        conversation = [{"role": "system", "content": "You are a painter."},
                        {"role": "user", "content": "Tell me how you paint."},
                        {"role": "assistant", "content": story},
                        {"role": "user", "content": "And then?"}]
        segments = SMOLLM2_CHAT.render(conversation)
        windowed = score_segments(segments, model=small)
        full = score_segments(segments, model=llm.get_local_model())
        # 435 tokens (30 steps; 40 made 575 and three cuts): the first window, then two slides of half the rest
        assert windowed.n_tokens > small.n_ctx and windowed.truncations >= 2 and full.truncations == 0
        for idx, body in ((1, conversation[1]["content"]), (2, story), (3, "And then?")):
            assert len(windowed.tokens[idx]) == len(small.tokenize(body))
        # The first window (~230 tokens) sees the same context as the full pass.
        head = [t.logprob for t in windowed.tokens[1] + windowed.tokens[2][:100]]
        ref = [t.logprob for t in full.tokens[1] + full.tokens[2][:100]]
        assert np.max(np.abs(np.array(head) - np.array(ref))) <= TOL
        # Later tokens lost context, so their log-probs differ.
        assert windowed.tokens[3][0].logprob != full.tokens[3][0].logprob
    finally:
        small.close()


def test_prefix_cache_gives_the_numbers_of_a_fresh_cache_and_skips_the_shared_prefix():
    """Two conversations alternate as agent and user do; cached and cleared caches must agree bit for bit."""
    from agentuq_nb.llm.local_provider import chat_completion, text_completion
    from agentuq_nb.llm.request import GenerationRequest

    cached, fresh = LocalModel(n_ctx=1024, prefix_cache=True), LocalModel(n_ctx=1024, prefix_cache=False)
    # short prompts and turns: the fresh cache decodes every prompt whole (~6 ms of CPU a token, ~25 ms a generated one)
    agent_system = {"role": "system", "content": "You are a bookshop agent. Be brief and polite. " * 4}
    user_system = {"role": "system", "content": "You are a customer who wants the book Dune. " * 4}

    def conversation(model):
        out, turns = [], [{"role": "user", "content": "Hi, I want to buy Dune."}]
        for turn in range(2):  # a greedy turn, then a sampled one that reuses the first turn's cached prefix
            agent = chat_completion([agent_system, *turns], GenerationRequest(
                tools=TOOLS, max_tokens=16, temperature=0.7 if turn % 2 else 0.0, seed=turn), model=model)
            turns.append({"role": "assistant", "content": agent.content or "", "tool_calls": agent.tool_calls})
            flipped = [{"role": "assistant" if m["role"] == "user" else "user", "content": m["content"] or "…"} for m in turns]
            user = chat_completion([user_system, *flipped], GenerationRequest(max_tokens=8, temperature=0.0), model=model)
            turns.append({"role": "user", "content": user.content or "ok"})
            # Seeded: OpenAI's default temperature is 1, and an unseeded draw differs between the two runs.
            echo = text_completion("<|im_start|>user\nhello there<|im_end|>", max_tokens=3, echo=True, logprobs=3,
                                   seed=turn, model=model)
            for completion in (agent, user):
                out.append((completion.content, str(completion.tool_calls),
                            [(t.token, t.logprob, [x[2] for x in t.top], t.full_entropy) for t in completion.tokens]))
            out.append([(t.token, t.logprob) for t in echo.prompt_logprobs + echo.tokens])
        return out

    try:
        assert conversation(cached) == conversation(fresh)
        # the agent's and the user's prompts each kept a slot of their own (~320 and ~130 tokens; the echo's is 7)
        assert sum(len(slot) > 100 for slot in cached._slots) >= 2
    finally:
        cached.close()
        fresh.close()


def test_chat_replay_rows_are_labelled_and_never_mixed():
    # the replayed reply is generated (16 tokens are as labelled as a full reply's)
    rows = llm.score(QUESTION[1:], {"role": "user", "content": "Thanks."}, backend="chat_replay", max_tokens=16)
    assert rows and {r["source"] for r in rows} == {"chat_replay"}
    assert {r["role"] for r in rows} == {"user"} and {r["message_idx"] for r in rows} == {1}


def test_missing_logprobs_is_a_clear_error():
    # litellm's mock_response answers offline, without logprobs, like a provider that drops them.
    with pytest.raises(llm.MissingLogprobsError, match=r"openai/gpt-4\.1.*logprobs=True"):
        llm.generate(QUESTION, model="openai/gpt-4.1", mock_response="Hello")


def test_teacher_forcing_a_model_without_prompt_logprobs_names_the_fallback():
    with pytest.raises(llm.PromptLogprobsUnavailable, match="chat_replay"):
        llm.score(QUESTION, {"role": "assistant", "content": "Hello"}, model="openai/gpt-3.5-turbo-instruct",
                  mock_response="x")


def test_rate_limits_are_retried(monkeypatch):
    calls = {"n": 0}
    real = litellm.completion

    def flaky(**request):
        calls["n"] += 1
        if calls["n"] < 3:
            raise litellm.RateLimitError(message="slow down", llm_provider="local", model=request["model"])
        return real(**request)

    monkeypatch.setattr(litellm, "completion", flaky)
    turn = llm.generate(QUESTION, max_tokens=4, retry=llm.RetryPolicy(max_retries=3, initial_delay=0.0))
    assert calls["n"] == 3 and turn.tokens


def test_a_remote_models_malformed_tool_arguments_are_kept_verbatim_not_raised():
    from agentuq_nb.llm.chat_format import normalize_tool_call, to_openai_message

    openai_call = {"id": "c1", "type": "function", "function": {"name": "get_order_status", "arguments": '{"order_id": "7'}}
    call = normalize_tool_call(openai_call)
    assert call == {"id": "c1", "name": "get_order_status", "arguments": '{"order_id": "7', "requestor": "assistant"}
    # replayed to an OpenAI-style API, the text goes back exactly as the model wrote it
    replay = to_openai_message({"role": "assistant", "content": None, "tool_calls": [call]})
    assert replay["tool_calls"][0]["function"]["arguments"] == '{"order_id": "7'
    assert normalize_tool_call({"name": "get_order_status", "arguments": ""})["arguments"] == {}


# ----------------------------------------------------------------------------- bounded tool-call grammar

LOOKUP_TOOLS = [
    {"type": "function", "function": {"name": "get_order", "description": "Look up an order by its id.",
     "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}},
    {"type": "function", "function": {"name": "find_user", "description": "Find a user id by name and zip code.",
     "parameters": {"type": "object", "properties": {"first_name": {"type": "string"}, "last_name": {"type": "string"},
                                                     "zip": {"type": "string"}},
                    "required": ["first_name", "last_name", "zip"]}}},
]
RETAIL_QUESTIONS = ["Hi, where is my order #W4821?", "I want to return the shoes from order W2378156.",
                    "My name is Yusuf Rossi, zip 19122. Please look me up.", "cancel it"]


def test_tool_call_strings_admit_no_raw_newline_and_close_within_the_bound():
    from agentuq_nb.llm.local_model import Grammar
    from agentuq_nb.llm.tool_format import MAX_STRING_CHARS, tool_call_grammar

    model = llm.get_local_model()
    grammar = Grammar(model, tool_call_grammar(LOOKUP_TOOLS[:1]))
    try:
        for token in model.tokenize('{"name": "get_order", "arguments": {"order_id": "'):
            grammar.accept(token)
        newline, letter, quote = model.tokenize("\n")[0], model.tokenize("a")[0], model.tokenize('"')[0]
        assert grammar.first_allowed(np.array([newline, letter])) == letter  # the raw newline is refused
        for _ in range(MAX_STRING_CHARS):
            grammar.accept(letter)
        assert grammar.first_allowed(np.array([letter, quote])) == quote  # full: only the closing quote
    finally:
        grammar.close()


@pytest.mark.slow
def test_forced_tool_calls_always_parse_across_seeds_and_prompts():
    # every question under both kinds of forced choice, the two seeds taking turns: each question is drawn with
    # both seeds and each choice with both seeds (a second seed for every pair drew the same path again, 16 calls)
    forced_choices = ["required", {"type": "function", "function": {"name": "get_order"}}]
    for q, question in enumerate(RETAIL_QUESTIONS):
        for c, choice in enumerate(forced_choices):
            seed = (q + c) % 2
            turn = llm.generate([{"role": "system", "content": "You are a retail agent."},
                                 {"role": "user", "content": question}],
                                tools=LOOKUP_TOOLS, tool_choice=choice, temperature=1.0, seed=seed, max_tokens=256)
            calls = turn.message["tool_calls"]
            assert calls, f"no tool call for {question!r}, seed {seed}, {choice}: {turn.message['content']!r}"
            assert calls[0]["name"] in {"get_order", "find_user"} and isinstance(calls[0]["arguments"], dict)


def test_in_json_string_follows_quotes_and_escapes():
    from agentuq_nb.llm.local_provider import in_json_string

    assert not in_json_string(b'{"a": "b"')
    assert in_json_string(b'{"a": "b')
    assert in_json_string(b'{"a": "say \\"hi')          # an escaped quote does not close
    assert not in_json_string(b'{"a": "c:\\\\"')       # an escaped backslash, then the closing quote


@pytest.mark.slow
def test_a_forced_call_closes_when_max_tokens_would_run_out_inside_a_string():
    """Long ids written digit by digit ran out of ``max_tokens`` inside the string (1 of 12 calls parsed
    at max_tokens=40 without the closing reserve): the last tokens prefer closers, so every call parses."""
    tools = [{"type": "function", "function": {"name": "get_order", "description": "Look up an order", "parameters": {
        "type": "object", "properties": {"order_id": {"type": "string"}, "note": {"type": "string"}},
        "required": ["order_id", "note"]}}}]
    questions = ["My order number is 12345678901234567890123456789012345678901234567890, where is it?",
                 "Where is order #W9999999999999999999999? note: urgent urgent urgent urgent"]
    for question in questions:
        for seed in range(3):
            turn = llm.generate([{"role": "system", "content": "You are a retail agent."},
                                 {"role": "user", "content": question}],
                                tools=tools, tool_choice="required", temperature=1.0, seed=seed, max_tokens=40)
            calls = turn.message["tool_calls"]
            assert calls, f"seed {seed}: {turn.message['content']!r}"
            assert set(calls[0]["arguments"]) == {"order_id", "note"}


# ----------------------------------------------------------------------------- context-overflow policy

LONG_CONVERSATION = [
    {"role": "system", "content": SYSTEM},
    *[m for i in range(4) for m in (
        {"role": "user", "content": f"Question {i}: " + "please tell me about my order history " * 6},
        {"role": "assistant", "content": f"Answer {i}: " + "your orders are on their way to you " * 6})],
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_order_status", "arguments": '{"order_id": "#W1"}'}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "status: delivered " * 20},
    {"role": "user", "content": "Thanks. Reply with one word."},
]


def test_drop_oldest_turns_keeps_the_system_prompt_the_last_turn_and_call_result_pairs():
    from agentuq_nb.llm.chat_format import normalize_message
    from agentuq_nb.llm.context_fit import drop_oldest_turns

    messages = [normalize_message(m) for m in LONG_CONVERSATION]
    for limit in range(2, len(messages) + 1):
        fitted = drop_oldest_turns(messages, lambda kept: len(kept) <= limit)
        kept = fitted.messages
        assert kept[0] == messages[0] and kept[-1] == messages[-1]
        assert kept == messages[:1] + messages[len(messages) - len(kept) + 1:]  # a suffix after the system prompt
        assert fitted.dropped_messages == len(messages) - len(kept)
        roles = [m["role"] for m in kept]
        assert roles[1] != "tool"  # a tool result never loses its call
        assert len(kept) <= limit or len(kept) == 2


def test_an_overflowing_chat_raises_by_default_and_drops_the_oldest_turns_with_fit_context():
    from agentuq_nb.llm.local_provider import chat_completion, segment_tokens
    from agentuq_nb.llm.request import GenerationRequest

    small = LocalModel(n_ctx=512)  # a small window, so that a short conversation (~600 tokens) overflows it
    try:
        full = len(segment_tokens(small, SMOLLM2_CHAT.render(LONG_CONVERSATION, next_role="assistant")))
        assert full + 32 > small.n_ctx
        with pytest.raises(llm.ContextWindowError):
            chat_completion(LONG_CONVERSATION, GenerationRequest(max_tokens=32, temperature=0), model=small)
        fitted = chat_completion(LONG_CONVERSATION, GenerationRequest(max_tokens=32, temperature=0, fit_context=True),
                                 model=small)
        assert fitted.dropped_messages > 0 and fitted.dropped_tokens > 0
        assert fitted.prompt_tokens == full - fitted.dropped_tokens and fitted.prompt_tokens + 33 <= small.n_ctx
        assert fitted.content is not None or fitted.tool_calls
    finally:
        small.close()


def test_fit_context_through_litellm_is_counted_in_usage():
    from agentuq_nb.llm.local_provider import segment_tokens

    model = llm.get_local_model()
    # the system prompt, two of the four question-answer pairs (each ~100 tokens: dropping the oldest frees the ~100
    # tokens asked for, or both), the call and its result, the last turn: the prompt is decoded twice, so the shorter
    # the better
    conversation = LONG_CONVERSATION[:1] + LONG_CONVERSATION[5:]
    full = len(segment_tokens(model, SMOLLM2_CHAT.render(conversation, tools=TOOLS, next_role="assistant")))
    max_tokens = model.n_ctx - full + 100  # room for the answer only without ~100 prompt tokens
    request = dict(model=llm.LOCAL_MODEL, messages=conversation, tools=TOOLS, tool_choice="required",
                   max_tokens=max_tokens, temperature=0)  # a forced call: the grammar keeps the answer short
    response = litellm.completion(**request, fit_context=True)
    assert response.usage.context_dropped_messages > 0 and response.usage.context_dropped_tokens >= 100
    assert response.usage.prompt_tokens == full - response.usage.context_dropped_tokens
    assert response.choices[0].message.tool_calls
    exact = litellm.completion(**request)  # the default keeps every turn (a longer prompt only raises)
    assert exact.usage.prompt_tokens == full and not hasattr(exact.usage, "context_dropped_messages")
