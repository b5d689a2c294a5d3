"""The slowest tests of a pytest run, and the time each test file took, from its JUnit XML report.

    python -m pytest --junitxml=report.xml tests/test_x.py ...
    python benchmarks/slowest_tests.py report.xml [--top 20] [--files 20] [--against before.xml]

``make test`` writes test-report.xml and runs this script on it at the end.
    python benchmarks/slowest_tests.py test-report.xml --order 14

``--order N`` prints the N slowest files as ``tests/conftest.py``'s ``SLOWEST_FILES`` (minutes per file): the
files ``make test`` hands to its workers first, so that no long file is left to run alone at the end. Paste it
there after a change that moves a file's time much.

Prints the ``--top`` slowest tests (a test's time is its call with its setup and teardown, as JUnit records it: a
module fixture's cost lands on the first test that asks for it) and the ``--files`` test files that took longest,
with each file's share of the total. Several reports (one per file run, or the workers' of one run) are added up.
``--against`` an earlier report prints each file's time before and after and the ratio, the files of both reports
only: what the suite's time is made of, file by file, measured the same way on the same machine.

The times are wall times: on a machine other processes share (2 cores here), compare files run back to back, not
runs made hours apart. pytest's own ``--durations=N`` prints the same per-test list at the end of a run; this
script reads the report afterwards, adds up files and compares two runs.
"""
from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def read_report(path: Path) -> dict[str, float]:
    """Seconds per test id (``file::name``) of a JUnit XML report (pytest's ``--junitxml``)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as err:
        raise SystemExit(f"{path}: not a readable JUnit XML report ({err})") from None
    times: dict[str, float] = {}
    for case in root.iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        module = classname.rsplit(".", 1)[0] if classname.split(".")[-1][:1].isupper() else classname
        file = module.replace(".", "/") + ".py"
        times[f"{file}::{name}"] = times.get(f"{file}::{name}", 0.0) + float(case.get("time") or 0.0)
    if not times:
        raise SystemExit(f"{path}: no test cases in this report")
    return times


def read_reports(paths: list[Path]) -> dict[str, float]:
    out: dict[str, float] = {}
    for path in paths:
        for test, seconds in read_report(path).items():
            out[test] = out.get(test, 0.0) + seconds
    return out


def per_file(times: dict[str, float]) -> dict[str, tuple[float, int]]:
    """(seconds, tests) per test file."""
    files: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for test, seconds in times.items():
        entry = files[test.split("::", 1)[0]]
        entry[0] += seconds
        entry[1] += 1
    return {f: (s, n) for f, (s, n) in files.items()}


def slowest_files_literal(files: dict[str, tuple[float, int]], n: int) -> str:
    """``SLOWEST_FILES = {...}``: the ``n`` slowest files' names and minutes (one decimal), slowest first."""
    ranked = sorted(files.items(), key=lambda kv: -kv[1][0])[:n]
    entries = [f'"{Path(file).name}": {max(seconds / 60, 0.1):.1f}' for file, (seconds, _) in ranked]
    lines, line = [], "   "
    for entry in entries:
        if len(line) + len(entry) + 2 > 116:
            lines.append(line.rstrip())
            line = "   "
        line += f" {entry},"
    lines.append(line)
    return "SLOWEST_FILES = {\n" + "\n".join(lines) + "\n}"


def minutes(seconds: float) -> str:
    return f"{seconds / 60:6.1f} min" if seconds >= 60 else f"{seconds:6.1f} s  "


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="JUnit XML reports (pytest --junitxml), added up")
    parser.add_argument("--top", type=int, default=20, help="slowest tests listed (default 20)")
    parser.add_argument("--files", type=int, default=20, help="slowest test files listed (default 20)")
    parser.add_argument("--against", nargs="+", type=Path, help="earlier report(s): each file before and after")
    parser.add_argument("--order", type=int, metavar="N",
                        help="print only the N slowest files as tests/conftest.py's SLOWEST_FILES")
    args = parser.parse_args(argv)

    times = read_reports(args.reports)
    if args.order is not None:
        print(slowest_files_literal(per_file(times), args.order))
        return 0
    total = sum(times.values())
    print(f"{len(times)} tests, {minutes(total).strip()} in tests (setup, call and teardown)\n")
    print(f"the {min(args.top, len(times))} slowest tests:")
    for test, seconds in sorted(times.items(), key=lambda kv: -kv[1])[:args.top]:
        print(f"  {minutes(seconds)}  {test}")
    files = per_file(times)
    print(f"\nthe {min(args.files, len(files))} slowest test files (share of the total):")
    for file, (seconds, n) in sorted(files.items(), key=lambda kv: -kv[1][0])[:args.files]:
        print(f"  {minutes(seconds)}  {100 * seconds / total:5.1f} %  {n:4d} tests  {file}")
    if args.against:
        before = per_file(read_reports(args.against))
        common = sorted(set(before) & set(files), key=lambda f: -before[f][0])
        print("\neach file before -> after (files in both reports):")
        for file in common:
            (b, nb), (a, na) = before[file], files[file]
            print(f"  {minutes(b)} -> {minutes(a)}  x{a / b if b else float('nan'):5.2f}  "
                  f"{nb:4d} -> {na:4d} tests  {file}")
        b, a = sum(before[f][0] for f in common), sum(files[f][0] for f in common)
        print(f"  {minutes(b)} -> {minutes(a)}  x{a / b if b else float('nan'):5.2f}  in all ({len(common)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
