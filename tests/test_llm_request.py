"""The request objects of the LLM layer (issue 52 point 4): made once from the call's keywords and handed down."""
from __future__ import annotations

from agentuq_nb.llm.request import GenerationRequest, ScoringRequest

TOOL = {"name": "get_order", "parameters": {"type": "object", "properties": {}}}


def test_split_keeps_the_request_fields_and_hands_the_rest_to_litellm():
    request, extra = GenerationRequest.split({"max_tokens": 12, "seed": None, "api_base": "http://x"},
                                             temperature=1.0, seed=0)
    assert request == GenerationRequest(temperature=1.0, seed=None, max_tokens=12)  # a given None beats a default
    assert extra == {"api_base": "http://x"}


def test_completion_args_are_those_litellm_takes():
    request = GenerationRequest(tools=[TOOL], tool_choice="required", temperature=0.0, seed=3, max_tokens=8,
                                top_logprobs=2, fit_context=True)
    args = request.completion_args("local/x", [{"role": "user", "content": "hi"}], {"api_key": "k"}, n=3)
    assert args == {"model": "local/x", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.0,
                    "max_tokens": 8, "logprobs": True, "top_logprobs": 2, "api_key": "k", "seed": 3,
                    "fit_context": True, "n": 3, "tools": [{"type": "function", "function": TOOL}],
                    "tool_choice": "required"}
    plain = GenerationRequest().completion_args("m", [], {})
    assert not {"seed", "fit_context", "n", "tools", "tool_choice"} & set(plain)
    assert request.with_seed(4).seed == 4 and request.seed == 3  # frozen: a new request, the old one unchanged


def test_a_providers_params_make_the_same_request_back():
    request = GenerationRequest(tools=[{"type": "function", "function": TOOL}], temperature=0.5, seed=1, max_tokens=9,
                                top_logprobs=4)
    args = request.completion_args("m", [], {})
    assert GenerationRequest.from_params(args) == request
    assert GenerationRequest.from_params({**args, "logprobs": False}).top_logprobs == 0  # log-probs only if asked
    assert GenerationRequest.from_params({"max_completion_tokens": 5, "max_tokens": 7}).max_tokens == 5


def test_scoring_request_split_and_row_keys():
    scoring, extra = ScoringRequest.split({"system": "s", "scorer": "mode", "api_base": "http://x"})
    assert (scoring.system, scoring.backend, extra) == ("s", "teacher_forced", {"api_base": "http://x"})
    assert scoring.row_keys("m") == {"model": "m", "scorer": "mode", "source": "teacher_forced"}
    assert ScoringRequest().row_keys("m")["scorer"] == "m"
