"""A prompt prefix shared between requests is decoded once (issue 33): the embedded model copies it from the slot that
holds it, and the numbers stay those of decoding every token from scratch."""
from __future__ import annotations

import json

import numpy as np
import pytest
from tests.test_llm_local import TOOLS

from agentuq_nb import llm
from agentuq_nb.io.store.token_table import read_token_table
from agentuq_nb.llm.chat_format import SMOLLM2_CHAT
from agentuq_nb.llm.local_model import PREFIX_COPY_MIN, LocalModel
from agentuq_nb.llm.local_provider import chat_samples
from agentuq_nb.llm.local_scoring import score_segments
from agentuq_nb.llm.request import GenerationRequest
from agentuq_nb.steps.rescore import rescore
from agentuq_nb.uq.observation import agent_system_prompt

TOL = 1e-4  # measured: 0 (bit for bit) on these inputs and on real trajectories
POLICY = ("You are a customer service agent for an online bookshop. Follow the policy below exactly. "
          "Orders can be cancelled while they are pending; delivered orders can be returned within 30 days, "
          "refunds go to the original payment method, and gift cards cannot be refunded. Always confirm the order "
          "id and the action with the user before any change, and transfer to a human agent when the request is "
          "outside this policy. ") * 2


def dialogue(book: str, order: str) -> list[dict]:
    """A conversation whose body is longer than the system prompt, so that it does not continue another's slot."""
    return [
        {"role": "user", "content": f"Hello, I ordered {book} last week (order {order}) and it has not arrived. "
                                    "Could you tell me where it is and whether I can still cancel it?"},
        {"role": "assistant", "content": f"Of course. Let me look up order {order} for you before anything else."},
        {"role": "user", "content": "Thanks. If it is still pending I would like to cancel it and get a refund to "
                                    "my credit card, because I found the same book in a shop near my home."},
        {"role": "assistant", "content": f"Order {order} is pending, so it can be cancelled. Shall I cancel it and "
                                         "refund the card you paid with?"},
        {"role": "user", "content": "Yes please, go ahead and cancel it. And please send me an email to confirm."},
        {"role": "assistant", "content": f"Done: order {order} is cancelled and the refund is on its way to your "
                                         "card; it usually shows within five business days. A confirmation email "
                                         "has been sent. Is there anything else I can help you with today?"},
        {"role": "user", "content": "No, that is all. Thank you for the quick help, have a nice day!"},
    ]


CONVERSATIONS = [dialogue("Dune", "#W4821"), dialogue("Emma", "#W1177"), dialogue("Ulysses", "#W9034")]


def scored_logprobs(model: LocalModel, messages: list[dict]):
    scored = score_segments(SMOLLM2_CHAT.render(messages, system=POLICY), model=model)
    return np.array([t.logprob for i in sorted(scored.tokens) for t in scored.tokens[i]]), scored


@pytest.fixture(scope="module")
def models():
    cached, fresh = LocalModel(n_ctx=1024, prefix_cache=True), LocalModel(n_ctx=1024, prefix_cache=False)
    yield cached, fresh
    cached.close()
    fresh.close()


def test_trajectories_of_one_file_decode_the_shared_system_prompt_once(models):
    cached, fresh = models
    n_system = len(SMOLLM2_CHAT.render([], system=POLICY)[0].text) // 8  # a lower bound of its tokens
    results = [scored_logprobs(cached, msgs) for msgs in CONVERSATIONS]
    first, *later = [scored for _, scored in results]
    assert first.reuse.reused == 0 and first.reuse.evaluated == first.n_tokens
    for (got, scored), msgs in zip(results[1:], CONVERSATIONS[1:]):  # the first decoded every token anyway
        want, _ = scored_logprobs(fresh, msgs)
        assert got.shape == want.shape and np.max(np.abs(got - want)) <= TOL
    for scored in later:
        # each later trajectory took the system prompt out of the first one's slot and decoded only its own tokens
        assert scored.reuse.copies == 1 and scored.reuse.copied == scored.reuse.reused >= max(n_system, PREFIX_COPY_MIN)
        assert scored.reuse.evaluated + scored.reuse.reused == scored.n_tokens
    assert fresh.reuse.reused == 0


def test_samples_at_a_decision_point_reuse_the_prompt_and_equal_those_of_a_fresh_model(models):
    cached, fresh = models
    cached.clear_cache()
    scored_logprobs(cached, CONVERSATIONS[0])  # the system prompt is in one slot now, the others are empty
    context = [{"role": "system", "content": POLICY}, *CONVERSATIONS[1]]
    before = cached.reuse.copied
    request = GenerationRequest(tools=TOOLS, temperature=1.0, seed=11, max_tokens=24, top_logprobs=3)
    batched = chat_samples(context, 3, request, model=cached)
    assert cached.reuse.copied - before >= PREFIX_COPY_MIN  # the system prompt was copied, not decoded again
    again = chat_samples(context, 3, request, model=cached)  # seeded: the same samples again
    scratch = chat_samples(context, 3, request, model=fresh)
    for a, b, c in zip(batched, again, scratch):
        assert a.content == b.content == c.content and a.tool_calls == b.tool_calls == c.tool_calls
        assert [t.token for t in a.tokens] == [t.token for t in c.tokens]
        assert max((abs(x.logprob - y.logprob) for x, y in zip(a.tokens, c.tokens)), default=0.0) <= TOL
    assert len({(c.content, str(c.tool_calls)) for c in batched}) >= 2  # K distinct seeds, distinct samples


def test_rescore_reports_its_cost_and_reuse_and_equals_scoring_from_scratch(tmp_path, tau2_files):
    """rescore of a real file (its policy shortened, its trajectories cut) against the same with the cache off."""
    data = json.loads(tau2_files[0].read_text())
    data["info"]["environment_info"]["policy"] = data["info"]["environment_info"]["policy"][:600]
    data["simulations"] = data["simulations"][:3]
    for sim in data["simulations"]:
        sim["messages"] = sim["messages"][:5]
    results = tmp_path / "real_cut.json"
    results.write_text(json.dumps(data))
    model = llm.get_local_model()
    model.clear_cache()
    cached = rescore(results, tmp_path / "cached", progress=False)
    model.prefix_cache = False
    try:
        scratch = rescore(results, tmp_path / "scratch", progress=False)
    finally:
        model.prefix_cache = True
    a, b = read_token_table(tmp_path / "cached"), read_token_table(tmp_path / "scratch")
    assert len(a) == len(b) and (a["token"] == b["token"]).all()
    assert np.max(np.abs(a["chosen_logprob"].to_numpy() - b["chosen_logprob"].to_numpy())) <= TOL
    assert cached.as_dict() == scratch.as_dict()  # the report's terms do not depend on the cache
    assert cached.cost.trajectories == 3 and scratch.cost.tokens_reused == 0
    # the two later trajectories each reused the system prompt (~240 tokens here; ~4 characters a token)
    n_system = len(agent_system_prompt(data["info"])) // 5
    assert cached.cost.tokens_reused >= 2 * max(n_system, PREFIX_COPY_MIN)
    assert cached.cost.tokens_evaluated + cached.cost.tokens_reused == scratch.cost.tokens_evaluated
    line = cached.cost.line()
    assert "3 trajectories" in line and "s per trajectory" in line and "taken from the cache" in line
