"""Each default has one home: every CLI option that sets a config field has that field's default, the failure
threshold and the bootstrap count are written once, and no function states its own copy of them."""
from __future__ import annotations

import ast
from pathlib import Path

import typer

from agentuq_nb.cli import app
from agentuq_nb.evaluation.defaults import DEFAULT_N_BOOT
from agentuq_nb.intervention.config import PolicyConfig
from agentuq_nb.records.config import ActionSamplingConfig, ExecutionConfig, ScoringConfig, SimulationConfig
from agentuq_nb.records.outcomes import DEFAULT_FAILURE_THRESHOLD
from agentuq_nb.steps.analyze import AnalyzeConfig
from agentuq_nb.steps.blackbox import BlackBoxConfig
from agentuq_nb.steps.calibrate import CalibrateConfig
from agentuq_nb.steps.compare_estimators import CompareEstimatorsConfig
from agentuq_nb.steps.compare_runs import CompareRunsConfig
from agentuq_nb.steps.early_warning import EarlyWarningConfig
from agentuq_nb.steps.evaluate import EvaluateConfig
from agentuq_nb.steps.probe import ProbeConfig
from agentuq_nb.steps.saup import SaupConfig
from agentuq_nb.steps.trials import TrialsConfig
from agentuq_nb.steps.verbalized import VerbalizedConfig

SRC = Path(__file__).resolve().parents[1] / "src" / "agentuq_nb"

#: the configs each command fills from its options, and the prefix its options give a config's fields
COMMAND_CONFIGS = {
    "simulate": [(SimulationConfig, ""), (ExecutionConfig, ""), (PolicyConfig, "policy_")],
    "sample-actions": [(ActionSamplingConfig, ""), (ExecutionConfig, "")],
    "score-observations": [(ScoringConfig, ""), (ExecutionConfig, "")],
    "rescore": [(ScoringConfig, "")],
    "blackbox": [(BlackBoxConfig, "")],
    "analyze": [(AnalyzeConfig, ""), (BlackBoxConfig, "")],
    "compare-estimators": [(CompareEstimatorsConfig, ""), (BlackBoxConfig, "")],
    "evaluate": [(EvaluateConfig, "")],
    "calibrate": [(CalibrateConfig, "")],
    "saup": [(SaupConfig, "")],
    "early-warning": [(EarlyWarningConfig, "")],
    "trials": [(TrialsConfig, "")],
    "compare-runs": [(CompareRunsConfig, "")],
    "probe": [(ProbeConfig, "")],
    "verbalized-confidence": [(VerbalizedConfig, "")],
}
#: options whose None means "not asked for" where the field has a value: the policy is off without --policy,
#: and a random policy's action is named differently on the command line
RENAMED = {("simulate", "policy_action"): (PolicyConfig, "random_action")}
NOT_A_FIELD_DEFAULT = {("simulate", "policy")}


def commands() -> dict[str, object]:
    return typer.main.get_command(app).commands


def config_field(command: str, option: str):
    if (command, option) in RENAMED:
        return RENAMED[(command, option)]
    for config, prefix in COMMAND_CONFIGS.get(command, []):
        for name in (option, option.removeprefix(prefix) if prefix and option.startswith(prefix) else None):
            if name is not None and name in config.model_fields:
                return config, name
    return None


def plain(value):
    return value.value if hasattr(value, "value") else value


def test_every_option_of_a_config_field_has_the_fields_default():
    compared = []
    for name, command in commands().items():
        for param in command.params:
            if (name, param.name) in NOT_A_FIELD_DEFAULT or param.required:
                continue
            found = config_field(name, param.name)
            if found is None:
                continue
            config, field = found
            expected = config.model_fields[field].get_default(call_default_factory=True)
            assert plain(param.default) == expected, (f"{name} --{param.name.replace('_', '-')}: default "
                                                      f"{param.default!r}, {config.__name__}.{field}: {expected!r}")
            compared.append((name, param.name))
    assert len(compared) >= 30, compared  # the table above is used: simulate alone has 16 such options
    assert {c for c, _ in compared} == set(COMMAND_CONFIGS)


def test_failure_threshold_and_bootstrap_count_are_the_same_everywhere():
    seen = {"failure_threshold": 0, "n_boot": 0}
    for name, command in commands().items():
        for param in command.params:
            if param.name in seen:
                seen[param.name] += 1
                expected = DEFAULT_FAILURE_THRESHOLD if param.name == "failure_threshold" else DEFAULT_N_BOOT
                assert param.default == expected, f"{name} --{param.name}: {param.default!r}"
    assert seen["failure_threshold"] >= 8 and seen["n_boot"] >= 5, seen


def test_no_function_writes_its_own_copy_of_the_shared_defaults():
    """``failure_threshold=1.0`` or ``n_boot=1000`` as a literal default anywhere in the package is a second home
    of the same fact (a deliberately other value, as the agent leaderboard's 2,000 resamples, is another fact)."""
    shared = {"failure_threshold": DEFAULT_FAILURE_THRESHOLD, "n_boot": DEFAULT_N_BOOT}
    copies = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, default in pairs:
                if isinstance(default, ast.Constant) and shared.get(arg.arg, object()) == default.value:
                    copies.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name}({arg.arg}={default.value!r})")
    assert not copies, copies


def test_every_command_but_reproduce_is_made_from_its_step_module():
    """One way to add a command: a step module (config, run, STEP, COMMAND); cli.py writes none by hand."""
    from agentuq_nb.steps import step_modules

    steps = {module.STEP.name for module in step_modules() if module.STEP.command_line}
    assert steps <= set(commands()), steps - set(commands())
    assert set(commands()) - steps == {"reproduce"}  # runs papermill: the pipeline, above the steps
    assert len((SRC / "cli.py").read_text().splitlines()) <= 300
    assert "Embedder" not in (SRC / "cli.py").read_text()  # the choices are the configs' Literals


def test_an_option_says_its_fields_description_where_the_step_gives_no_other_help():
    from agentuq_nb.steps.evaluate import EvaluateConfig

    options = {param.name: param for param in commands()["evaluate"].params}
    for name in ("uncertainty", "role", "scorer", "failure_threshold", "n_boot", "seed"):
        assert options[name].help == EvaluateConfig.model_fields[name].description, name
