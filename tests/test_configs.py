"""Typed configurations, the one redaction policy, the one slug: errors name the field, secrets never pass."""
from __future__ import annotations

import json

import pytest
import yaml

from agentuq_nb.common.naming import slug
from agentuq_nb.common.redaction import find_secret, names_secret, redact
from agentuq_nb.io.errors import InputError
from agentuq_nb.pipeline.reproduce import load_studies
from agentuq_nb.pipeline.spec import StudySpec
from agentuq_nb.records.config import EMBEDDED_MODEL, ScoringConfig, SimulationConfig
from agentuq_nb.sim import run_simulations


def test_a_bad_simulation_option_is_named():
    with pytest.raises(ValueError, match="simulation option 'num_trials': .*greater than or equal to 1"):
        run_simulations("bookshop", "unused", num_trials=0)
    with pytest.raises(ValueError, match="simulation option 'scaffold'"):
        run_simulations("bookshop", "unused", scaffold="huge")
    with pytest.raises(TypeError, match=r"unknown simulation option\(s\) \['num_trails'\]"):
        run_simulations("bookshop", "unused", num_trails=2)


def test_the_fingerprint_is_the_dump_without_selection_and_secrets(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-0123456789abcdef")
    config = SimulationConfig(domain="bookshop", task_ids=[1, "2"], num_trials=3,
                              agent_llm_args={"api_key": "x", "api_base": "http://u:pw@h/v1", "note": "tok-0123456789abcdef"})
    assert config.task_ids == ["1", "2"]
    fingerprint = config.fingerprint()
    assert set(fingerprint) == set(SimulationConfig.model_fields) - SimulationConfig.SELECTION
    assert fingerprint["agent_llm_args"] == {"api_base": "http://***@h/v1"}
    assert fingerprint["num_trials"] == 3 and fingerprint["agent_llm"] == EMBEDDED_MODEL
    assert SimulationConfig(domain="bookshop").style(EMBEDDED_MODEL) == "tiny"
    assert SimulationConfig(domain="bookshop").style("openai/gpt-4.1") == "tau2"


def test_scoring_config_names_its_tables_and_refuses_nothing_to_score():
    assert ScoringConfig(backend="echo").source == "teacher_forced"
    assert ScoringConfig(backend="chat_replay", scorer_mode="auxiliary_llm").observation_table_suffix() == "auxiliary_llm_replay"
    assert ScoringConfig(scorer_llm=None).scorer_llm == EMBEDDED_MODEL
    with pytest.raises(ValueError, match="nothing to score"):
        ScoringConfig(user_messages=False, tool_messages=False).observation_roles()


@pytest.mark.parametrize("spec, where", [
    ({"notebooks": []}, "notebooks"),
    ({"notebooks": ["01_simulate", {"parameters": {}}]}, r"notebooks\[1\]\.name"),
    ({"notebooks": ["01_simulate"], "grid": {"seed": []}}, "grid"),
    ({"notebooks": ["01_simulate"], "parameter": {}}, "parameter"),
])
def test_a_bad_params_file_names_the_file_and_the_field(tmp_path, spec, where):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(InputError, match=rf"study.yaml: .*\(at {where}"):
        load_studies(path)


def test_study_spec_normalizes_notebook_entries():
    spec = StudySpec.model_validate({"notebooks": ["a", {"name": "b", "parameters": None}], "parameters": None})
    assert [(n.name, n.parameters) for n in spec.notebooks] == [("a", {}), ("b", {})]


@pytest.mark.parametrize("value", [
    "sk-proj-abcdefghijklmnopqrstuvwx", "sk-ant-api03-abcdefghijklmnopqrst", "sk-abcdefghijklmnopqrstuvwx",
    "Bearer abc.def-ghi_jkl", "hf_abcdefghijklmnopqrstuvwxyz", "AKIAABCDEFGHIJKLMNOP",
])
def test_common_key_shapes_are_secrets_even_outside_the_environment(value):
    assert find_secret({"headers_note": ["ok", {"x": f"value {value} here"}]}) is not None
    assert value not in str(redact({"note": f"see {value}", "kept": "fine"}))


def test_names_that_hold_secrets_and_names_that_do_not():
    for name in ("OPENAI_API_KEY", "HF_TOKEN", "api_key", "apiKey", "Authorization", "extra_headers", "db_password"):
        assert names_secret(name), name
    for name in ("max_tokens", "top_logprobs", "tokens_per_message", "TOKENIZERS_PARALLELISM", "keyboard"):
        assert not names_secret(name), name


def test_an_environment_key_inside_a_parameter_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "not-shaped-but-secret-123")
    path = tmp_path / "leaky.yaml"
    path.write_text(yaml.safe_dump({"notebooks": ["04_evaluate"], "parameters": {"note": "x not-shaped-but-secret-123 y"}}))
    with pytest.raises(InputError, match=r"API key set in the environment.*\(at parameters.note\)"):
        load_studies(path)


def test_one_slug():
    assert slug("openai/gpt-4.1") == "openai_gpt-4.1"
    assert slug("a  b//c") == "a_b_c"
    assert slug("1,2 +x", keep=",+") == "1,2_+x"


def test_paths_in_the_environment_are_not_secrets_and_run_together_names_are(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", str(tmp_path))
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"notebooks": ["04_evaluate"], "parameters": {"results": f"{tmp_path}/r.json"}}))
    assert load_studies(path)[0].notebooks[0][1]["results"].startswith(str(tmp_path))
    for name in ("PGPASSWORD", "SECRETKEY", "accesstoken", "authtoken", "privatekey"):
        assert names_secret(name), name


def test_a_run_of_an_older_version_resumes_and_another_is_refused(tmp_path):
    from agentuq_nb.io.store.rundir import RunDir
    from agentuq_nb.sim.agent import LLMAgent
    from agentuq_nb.sim.runner import RunConfigMismatch, check_run_config, legacy_fingerprint, run_fingerprint
    from agentuq_nb.sim.user_simulator import UserSimulator

    config = SimulationConfig(domain="bookshop", seed=7)
    agent = LLMAgent(llm=EMBEDDED_MODEL, policy="p", tools=[], style="tiny")
    user = UserSimulator(llm=EMBEDDED_MODEL, scenario=None)
    run = RunDir(tmp_path / "old")
    run.path.mkdir()
    run.file("run_config").write_text(json.dumps(legacy_fingerprint(config, agent, user)))
    check_run_config(run, run_fingerprint(config, agent, user), legacy_fingerprint(config, agent, user))
    assert "simulation" in json.loads(run.file("run_config").read_text())  # now recorded in today's form
    other = RunDir(tmp_path / "other")
    other.path.mkdir()
    other.file("run_config").write_text(json.dumps({**legacy_fingerprint(config, agent, user), "seed": 8}))
    with pytest.raises(RunConfigMismatch, match=r"\(seed differ\)"):
        check_run_config(other, run_fingerprint(config, agent, user), legacy_fingerprint(config, agent, user))


def test_file_keys_keep_distinct_ids_distinct_and_plain_ids_as_they_are():
    from agentuq_nb.common.naming import file_key
    from agentuq_nb.io.ingest.sidecars import sidecar_name
    from agentuq_nb.sim.runner import checkpoint_name

    ids = ["a|b", "a:b", "a_b", "task 1", "task/1", "[svc]x|y", "[svc]x:y"]
    assert len({file_key(i) for i in ids}) == len(ids)
    assert len({checkpoint_name("telecom", i, 0, 1) for i in ids}) == len(ids)
    assert len({sidecar_name("telecom", i, 0, 1) for i in ids}) == len(ids)
    assert file_key("10") == "10" and sidecar_name("bookshop", "10", 0, 5) == "logprobs_bookshop_10_trial0_seed5.jsonl"
