"""Tool schemas and serve-local requests bounded by construction (issue 41, point 3): a schema is checked once with
limits on its counts, size and depth before any prompt or grammar is built from it, wherever it comes from (a
request to serve-local, a --tools file, the tools a results file records); serve-local refuses an oversize or
over-deep body before parsing it, and no request holds the model longer than the server's limit."""
from __future__ import annotations

import json
import socket
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient
from tests.test_hostile_folders import assert_ended_cleanly, run_cli
from tests.test_llm_server import assert_no_server_details, chat_body

from agentuq_nb.common.limits import MAX_REQUEST_BYTES, MAX_SCHEMA_ITEMS, MAX_TOOL_SCHEMA_DEPTH
from agentuq_nb.llm import server
from agentuq_nb.llm.tool_format import ToolSchemaError, check_tool_schemas, tool_call_grammar


def tool(parameters) -> dict:
    return {"type": "function", "function": {"name": "f", "description": "a tool", "parameters": parameters}}


def one_argument(schema) -> dict:
    return tool({"type": "object", "properties": {"a": schema}, "required": ["a"]})


def nested(levels: int) -> dict:
    schema = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"x": schema}, "required": ["x"]}
    return schema


#: the issue's schemas (and their kin): each refused with the place and the bound, before a grammar is built
HOSTILE_SCHEMAS = {
    "minItems 1e9 (23.5 GB before)": (one_argument({"type": "array", "items": {"type": "string"},
                                                    "minItems": 1_000_000_000}), "minItems is 1000000000"),
    "minLength 1e8 (2.3 GB before)": (one_argument({"type": "string", "minLength": 100_000_000}),
                                      "minLength is 100000000"),
    "maxItems past the bound": (one_argument({"type": "array", "maxItems": MAX_SCHEMA_ITEMS + 1}), "maxItems is"),
    "a count that is a boolean": (one_argument({"type": "string", "maxLength": True}), "maxLength is True"),
    "a count that is a string": (one_argument({"type": "string", "maxLength": "9"}), "maxLength is '9'"),
    "minimum above maximum": (one_argument({"type": "array", "minItems": 5, "maxItems": 2}), "no value fits"),
    "an empty enum": (one_argument({"type": "string", "enum": []}), "enum is empty"),
    "nested 300 deep (held the model 70 s)": (one_argument(nested(150)), "nested"),
    "parameters not an object": (tool([1, 2]), "parameters is a list"),
    "no name": ({"type": "function", "function": {"parameters": {}}}, "no function name"),
    "not a JSON schema": (one_argument({"type": "strin"}), "not a valid JSON schema"),
    "a count deep inside": (one_argument({"type": "object", "properties": {"b": {"type": "array", "items": {
        "type": "string", "maxLength": 10**12}}}}), "parameters.properties.a.properties.b.items.maxLength"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_SCHEMAS))
def test_hostile_tool_schemas_are_refused_naming_the_place(case):
    spec, said = HOSTILE_SCHEMAS[case]
    with pytest.raises(ToolSchemaError) as refused:
        check_tool_schemas([spec])
    assert said in str(refused.value) and "\n" not in str(refused.value), refused.value


def test_the_schema_check_in_a_fresh_process_skips_the_iri_grammar_and_still_checks_the_meta_schemas_formats():
    """A process that checks a tool schema first imports jsonschema without rfc3987_syntax (38 lark grammars, 1.5 s
    of CPU a process, for iri formats the meta-schema does not use); its uri-reference and regex formats still refuse,
    and rfc3987_syntax can still be imported by whoever wants it."""
    import subprocess
    import sys

    code = """
import json, sys
from agentuq_nb.llm.tool_format import schema_problem
bad_id = schema_problem(json.dumps({"type": "object", "$id": "http://[bad"}))
bad_pattern = schema_problem(json.dumps({"type": "object", "properties": {"a": {"type": "string", "pattern": "(["}}}))
print(json.dumps([bad_id, bad_pattern, schema_problem(json.dumps({"type": "object"})), "rfc3987_syntax" in sys.modules]))
import rfc3987_syntax
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    bad_id, bad_pattern, good, loaded = json.loads(done.stdout)
    assert "is not a 'uri-reference' at parameters/$id" in bad_id
    assert "is not a 'regex' at parameters/properties/a/pattern" in bad_pattern
    assert good is None and loaded is False


def test_a_property_named_like_a_keyword_is_a_name_and_counts_within_bounds_pass():
    spec = tool({"type": "object", "properties": {"minItems": {"type": "string"}, "enum": {"type": "integer"},
                                                  "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                                           "minItems": 1, "maxItems": MAX_SCHEMA_ITEMS}}})
    assert check_tool_schemas([spec]) == [spec]
    assert check_tool_schemas([spec["function"]]) == [spec]  # a bare function is wrapped


# a schema strategy that reaches past every bound
COUNTS = st.one_of(st.integers(-2, 2 * MAX_SCHEMA_ITEMS), st.sampled_from([10**9, 10**12, 2**63]), st.booleans(),
                   st.just("3"), st.none())
SCHEMAS = st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "number", "boolean"])},
                          optional={"maxLength": COUNTS, "minLength": COUNTS,
                                    "enum": st.lists(st.integers(0, 3), max_size=3), "pattern": st.just("^a{2,9}$")}),
    lambda inner: st.one_of(
        st.fixed_dictionaries({"type": st.just("array"), "items": inner},
                              optional={"minItems": COUNTS, "maxItems": COUNTS}),
        st.fixed_dictionaries({"type": st.just("object"), "properties": st.dictionaries(
            st.sampled_from(["a", "b", "minItems", "enum"]), inner, min_size=1, max_size=3)})),
    max_leaves=6)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(schema=SCHEMAS, depth=st.integers(0, MAX_TOOL_SCHEMA_DEPTH // 2 + 2))
def test_any_schema_is_refused_in_one_line_or_gives_a_small_grammar(schema, depth):
    """Accepted schemas give a grammar whose size stays small (every repetition it spells out is bounded);
    refused ones say so in one ToolSchemaError, never another exception."""
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    spec = one_argument(schema)
    try:
        tools = check_tool_schemas([spec])
    except ToolSchemaError as err:
        assert "\n" not in str(err) and str(err).startswith("tools[0]")
        return
    grammar = tool_call_grammar(tools)
    assert len(grammar) < 2_000_000, len(grammar)


# --------------------------------------------------------------------------- serve-local

def app_client(**options) -> TestClient:
    return TestClient(server.make_app(max_tokens_cap=4, **options))


@pytest.mark.parametrize("case", ["minItems 1e9 (23.5 GB before)", "minLength 1e8 (2.3 GB before)", "an empty enum",
                                  "nested 300 deep (held the model 70 s)"])
def test_serve_local_refuses_the_issues_schemas_with_a_400_before_the_model(case):
    spec, said = HOSTILE_SCHEMAS[case]
    with app_client() as app:
        started = time.monotonic()
        response = app.post("/v1/chat/completions", json=chat_body(tools=[spec], tool_choice="required"))
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert ("nested" in message if "deep" in case else said in message), message
    assert_no_server_details(message)
    assert time.monotonic() - started < 10


def test_a_body_nested_100000_deep_is_a_400_not_a_500():
    body = b'{"model": "local/smollm2-135m-instruct", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with app_client() as app:
        response = app.post("/v1/chat/completions", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and "nested more than" in response.json()["error"]["message"]


def test_an_oversize_body_is_refused_by_its_length_before_it_is_read():
    """The 30 MB body was read for ~20 s and 1.3 GB; now the declared length alone is refused (413): the client
    that waits for the answer before sending gets it, nothing of the body is read."""
    with server_thread() as port:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         + f"Content-Length: {30 << 20}\r\n\r\n".encode())
            answer = ""
            while not answer.rstrip().endswith("}"):  # the headers and the JSON body may come in two reads
                chunk = conn.recv(65536)
                if not chunk:
                    break
                answer += chunk.decode(errors="replace")
    status_line, _, rest = answer.partition("\r\n")
    assert " 413 " in status_line, answer
    assert f"more than the {MAX_REQUEST_BYTES:,}" in rest


def test_a_chunked_body_past_the_limit_is_refused_as_it_streams(monkeypatch):
    monkeypatch.setattr(server, "MAX_REQUEST_BYTES", 1000)
    body = json.dumps(chat_body(messages=[{"role": "user", "content": "x" * 5000}])).encode()
    with app_client() as app:
        response = app.post("/v1/chat/completions", content=iter([body[:600], body[600:]]))
    assert response.status_code == 413 and "more than 1,000 bytes" in response.json()["error"]["message"]


def test_the_bodies_waiting_for_the_model_are_bounded_together_and_given_back(monkeypatch):
    """60 clients' 15.9 MB bodies waiting their turn held 3.5 GB: the bodies held at once are bounded (503 past the
    budget, as they stream in), and each request gives its bytes back once answered."""
    monkeypatch.setattr(server, "MAX_HELD_REQUEST_BYTES", 3000)
    body = json.dumps(chat_body(model="not-served", messages=[{"role": "user", "content": "x" * 2000}])).encode()
    assert 2000 < len(body) < 3000
    with app_client() as app:
        for _ in range(3):  # one at a time: each fits, and gives its bytes back (404: the model is not served)
            assert app.post("/v1/chat/completions", content=body).status_code == 404
        assert app.app.state.bodies.held == 0
        assert app.app.state.bodies.take(1000)  # another request's body, waiting for the model
        response = app.post("/v1/chat/completions", content=body)
        assert response.status_code == 503, response.text
        assert "3,000 bytes of requests waiting" in response.json()["error"]["message"]
        app.app.state.bodies.give_back(1000)
        assert app.post("/v1/chat/completions", content=body).status_code == 404 and app.app.state.bodies.held == 0


def test_no_request_holds_the_model_longer_than_the_servers_limit():
    """A prompt of several decode batches (about 3,000 tokens: seconds of work on any CPU this runs on) outlasts a 1 s
    limit whatever the model would answer (a request that hoped for a long sampled story was answered in 27 tokens
    under 1 s once); the prompt starts with a number of its own, so no cached prefix shortens it."""
    prompt = f"{time.time_ns()} " + "The lighthouse keeper climbs the stairs and lights the lamp again. " * 250
    with app_client(max_request_seconds=1) as app:
        started = time.monotonic()
        response = app.post("/v1/chat/completions", json=chat_body(max_tokens=None, messages=[
            {"role": "user", "content": prompt}], temperature=1.0))
        held = time.monotonic() - started
        assert response.status_code == 504, response.text
        assert "max_request_seconds" in response.json()["error"]["message"]
        assert app.post("/v1/chat/completions", json=chat_body(max_tokens=1)).status_code == 200  # the model is free
    assert held < 30, held


class server_thread:
    """serve-local on a free port in a thread (the model loaded first); yields the port."""

    def __enter__(self) -> int:
        from conftest import serving_in_thread

        self._ctx = serving_in_thread()
        _, port, _ = self._ctx.__enter__()
        return port

    def __exit__(self, *exc) -> None:
        self._ctx.__exit__(*exc)


# --------------------------------------------------------------------------- the tools a results file records

def test_sample_actions_refuses_recorded_and_given_schemas_before_sampling(tmp_path):
    """The empty enum recorded in a results file was an 'internal error … llama.cpp rejected the tool-call grammar'
    after 23 s; a --tools file with minItems 1e9 grew the process to gigabytes."""
    from agentuq_nb.steps.extract import extract
    from agentuq_nb.testing.synthetic import write_synthetic_results

    results = write_synthetic_results(tmp_path / "src", num_simulations=2, messages_per_simulation=4, seed=1)
    data = json.loads(results.read_text())
    data["info"].setdefault("environment_info", {})["tool_defs"] = [one_argument({"type": "string", "enum": []})]
    recorded = tmp_path / "src" / "recorded.json"
    recorded.write_text(json.dumps(data))
    run = tmp_path / "run"
    extract(recorded, run)
    started = time.monotonic()
    code, stdout, stderr = run_cli("sample-actions", run, "--k", "2", "--max-tokens", "4")
    assert_ended_cleanly(code, stdout, stderr)
    assert code == 2 and "info.environment_info.tool_defs[0] ('f')" in stderr and "enum is empty" in stderr
    given = tmp_path / "tools.json"
    given.write_text(json.dumps([HOSTILE_SCHEMAS["minItems 1e9 (23.5 GB before)"][0]]))
    code, stdout, stderr = run_cli("sample-actions", run, "--k", "2", "--max-tokens", "4", "--tools", given)
    assert code == 2 and f"{given}: --tools[0] ('f'): parameters.properties.a.minItems" in stderr, stderr
    assert time.monotonic() - started < 60 and not (run / "action_samples.parquet").exists()
