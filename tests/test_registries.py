"""Registries you can read: a name is registered once (an estimator, a family, a step: a second one under a taken
name is refused), the step modules are those that declare a ``STEP`` (found, with no list of exclusions), and what
sets the length baselines and the combinations apart is declared on their families (``Family.reference``,
``Family.combination``), never a family name tested in the code."""
from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pandas as pd
import pytest

from agentuq_nb import estimators
from agentuq_nb.estimators.base import (
    FAMILIES,
    Estimator,
    Family,
    combination_families,
    declare_family,
    reference_families,
    register,
)

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "agentuq_nb"


def test_an_estimator_name_is_registered_once():
    class First(Estimator):
        name = "test.registered_once"

        def scores(self, run):
            raise AssertionError("never scored")

    class Second(First):
        pass

    register(First)
    try:
        register(First)  # the same class again (its module imported anew): the same estimator
        with pytest.raises(ValueError, match=r"'test.registered_once' is registered already \(by .*First\)"):
            register(Second)
        assert type(estimators.get("test.registered_once")) is First
        with pytest.raises(ValueError, match="'num_messages' is registered already"):
            register(type("MyLength", (First,), {"name": "num_messages"}))
    finally:
        estimators.unregister("test.registered_once")


def test_a_family_is_declared_once():
    assert declare_family(Family("baseline", rank=90, label="length baselines", color="neutral", reference=True)) \
        == FAMILIES["baseline"]  # the same declaration again: the same family
    with pytest.raises(ValueError, match="family 'token' is declared already"):
        declare_family(Family("token", rank=11))
    assert FAMILIES["token"].rank == 10


def test_a_step_name_is_declared_once():
    from agentuq_nb.steps.base import STEPS, Step

    with pytest.raises(ValueError, match="step 'aggregate' is declared already"):
        Step("aggregate", "agentuq-nb my-aggregate RUN_DIR")
    assert STEPS["aggregate"].command == "agentuq-nb aggregate RUN_DIR"


def test_the_step_modules_are_those_that_declare_a_step():
    import agentuq_nb.steps as steps
    from agentuq_nb.steps.base import Step

    declared = set()
    for info in pkgutil.iter_modules(steps.__path__):
        module = importlib.import_module(f"agentuq_nb.steps.{info.name}")
        if isinstance(vars(module).get("STEP"), Step):
            declared.add(info.name)
    assert set(steps.STEP_MODULES) == declared and "base" not in declared and "extract" in declared
    assert not hasattr(steps, "SHARED")  # no list of the modules that are not steps


def test_the_baselines_and_the_combinations_are_declared_on_their_families():
    assert reference_families() == {"baseline"} and combination_families() == {"combined"}
    assert all(e.family in reference_families() for e in map(estimators.get, estimators.BASELINES))


def test_a_family_declared_as_a_reference_is_drawn_as_one():
    """A yardstick family of one's own is drawn last beside the length baselines, every row of it kept."""
    from agentuq_nb.figures.estimators import forest_rows

    rows = [{"estimator": f"assistant.s{i}", "family": "token", "auroc": 0.8 - 0.01 * i} for i in range(4)]
    rows += [{"estimator": f"yard.{i}", "family": "yardstick", "auroc": 0.9 - 0.01 * i} for i in range(4)]
    rows += [{"estimator": "num_messages", "family": "baseline", "auroc": 0.6}]
    table = pd.DataFrame(rows).assign(auroc_lo=0.5, auroc_hi=0.95, n=90, n_failures=30, invert=False)
    try:
        declare_family(Family("yardstick", label="a yardstick", reference=True))
        assert reference_families() == {"baseline", "yardstick"}
        drawn = forest_rows(table, per_family=2)
        assert list(drawn["family"]) == ["token", "token", "baseline", "yardstick", "yardstick", "yardstick",
                                         "yardstick"]
        assert set(forest_rows(table, families=["token"])["family"]) == {"token", "baseline", "yardstick"}
    finally:
        FAMILIES.pop("yardstick", None)


SPECIAL_FAMILIES = ("baseline", "combined")


def _family_name_tests(path: Path, root: Path = PACKAGE) -> list[str]:
    """The comparisons in ``path`` of something with the string ``"baseline"`` or ``"combined"`` (``==``, ``!=``,
    ``in``, ``.eq(``, ``.isin([... ])``): a family told apart by its name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        operands = []
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("eq", "ne",
                                                                                                        "isin"):
            operands = list(node.args)
        for operand in operands:
            if isinstance(operand, ast.Constant) and operand.value in SPECIAL_FAMILIES:
                found.append(f"{path.relative_to(root)}:{node.lineno}")
            if isinstance(operand, (ast.Set, ast.List, ast.Tuple)) and any(
                    isinstance(e, ast.Constant) and e.value in SPECIAL_FAMILIES for e in operand.elts):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_family_is_told_apart_by_its_name():
    """Whether a family is the length baselines or the combinations is its declaration's (``Family.reference``,
    ``Family.combination``): no code compares a family with the names ``baseline`` or ``combined``."""
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _family_name_tests(path)]
    assert not found, found


def test_the_check_for_family_names_catches_one(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('def f(t, e):\n    return t[t["family"] == "baseline"], e.family != "combined", '
                      't["family"].isin(["baseline"])\n')
    assert len(_family_name_tests(sample, tmp_path)) == 3
