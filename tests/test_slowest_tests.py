"""benchmarks/slowest_tests.py: the slowest tests and test files of a pytest JUnit report, and each file before and
after, read from a report pytest itself wrote."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("slowest_tests", ROOT / "benchmarks" / "slowest_tests.py")
slowest_tests = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slowest_tests)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A JUnit report of a real pytest run: a module fixture, a class, a parametrized test, a failure."""
    folder = tmp_path_factory.mktemp("suite")
    (folder / "tests").mkdir()
    (folder / "tests" / "test_a.py").write_text(textwrap.dedent("""
        import pytest

        @pytest.fixture(scope="module")
        def made():
            return sum(range(10**6))

        def test_uses_the_fixture(made):
            assert made

        @pytest.mark.parametrize("n", [1, 2])
        def test_each(n):
            assert n

        class TestGroup:
            def test_in_a_class(self):
                assert True
        """))
    (folder / "tests" / "test_b.py").write_text("def test_fails():\n    assert False\n")
    out = folder / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                    f"--junitxml={out}", "tests"], cwd=folder, capture_output=True, timeout=300)
    return out


def test_each_test_is_named_by_its_file_and_timed(report):
    times = slowest_tests.read_report(report)
    assert set(times) == {"tests/test_a.py::test_uses_the_fixture", "tests/test_a.py::test_each[1]",
                          "tests/test_a.py::test_each[2]", "tests/test_a.py::test_in_a_class",
                          "tests/test_b.py::test_fails"}
    assert all(t >= 0 for t in times.values())
    assert slowest_tests.per_file(times)["tests/test_a.py"][1] == 4


def test_the_listing_and_the_comparison(report, capsys):
    assert slowest_tests.main([str(report), "--top", "2", "--against", str(report)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("5 tests, ") and "the 2 slowest tests:" in out
    listed = out.split("the 2 slowest tests:\n")[1].split("\n\n")[0].splitlines()
    assert len(listed) == 2 and all("tests/test_" in line for line in listed)
    assert "the 2 slowest test files" in out and "x 1.00" in out and "in all (2 files)" in out


def test_a_file_that_is_no_report_is_one_line(tmp_path):
    bad = tmp_path / "report.xml"
    bad.write_text("not xml")
    with pytest.raises(SystemExit, match="report.xml: not a readable JUnit XML report"):
        slowest_tests.read_report(bad)
    empty = tmp_path / "empty.xml"
    empty.write_text("<testsuites><testsuite/></testsuites>")
    with pytest.raises(SystemExit, match="no test cases"):
        slowest_tests.read_report(empty)


def test_the_order_for_conftest_is_the_slowest_files_first_as_a_python_literal(report, capsys):
    assert slowest_tests.main([str(report), "--order", "5"]) == 0
    out = capsys.readouterr().out
    namespace: dict = {}
    exec(out, namespace)  # what is pasted into tests/conftest.py
    files = slowest_tests.per_file(slowest_tests.read_report(report))
    expected = [Path(f).name for f, _ in sorted(files.items(), key=lambda kv: -kv[1][0])]
    assert list(namespace["SLOWEST_FILES"]) == expected and set(expected) == {"test_a.py", "test_b.py"}
    assert all(minutes >= 0.1 for minutes in namespace["SLOWEST_FILES"].values())
