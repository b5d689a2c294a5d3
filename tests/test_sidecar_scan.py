"""The compiled sidecar scanner (``io.ingest.sidecar_scan``) against DuckDB's reader, which it stands in for.

Wherever the scanner gives a table, it is DuckDB's table value for value (floats bit for bit); whatever
it does not take, DuckDB reads or refuses as before (the same table, the same error naming the file);
its numbers are correctly rounded (Python's ``float`` is the reference, near halfway points too); and the
rows agentuq and this project write are within its scope (else it would save nothing)."""
from __future__ import annotations

import json
import math
import struct
from decimal import Decimal, localcontext
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentuq_nb.io.errors import InputError, InputWarnings
from agentuq_nb.io.ingest import sidecar_scan
from agentuq_nb.io.ingest.sidecars import SIDECAR_SCHEMA, SidecarReader, scan_sidecars, write_sidecar
from agentuq_nb.records.tokens import make_token_row
from agentuq_nb.testing.synthetic import write_synthetic_results


def _canonical(value):
    """A value with floats as their bits (NaN as one token), so that equality is bit for bit."""
    if isinstance(value, float):
        return "nan" if math.isnan(value) else struct.pack("<d", value)
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def _rows(table: pa.Table) -> list[dict]:
    return [{k: _canonical(v) for k, v in row.items()} for row in table.to_pylist()]


def _duckdb(paths: list[Path]) -> list[pa.Table]:
    reader = SidecarReader(threads=1, scanner=False)
    try:
        return reader.read(paths)
    finally:
        reader.close()


def _scanned_per_file(paths: list[Path]) -> list[pa.Table] | None:
    scanned = scan_sidecars(paths)
    if scanned is None:
        return None
    table, rows, lines = scanned
    table.validate(full=True)  # offsets, UTF-8 and bitmaps as Arrow requires
    starts = np.concatenate([[0], np.cumsum(rows)])
    assert list(lines) == [_line_count(p) for p in paths]
    return [table.slice(int(starts[i]), int(rows[i])) for i in range(len(paths))]


def _line_count(path: Path) -> int:
    data = path.read_bytes()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _assert_same(paths: list[Path]) -> bool:
    """The scanner's tables equal DuckDB's (True), or the scanner stood aside (False)."""
    scanned = _scanned_per_file(paths)
    if scanned is None:
        return False
    expected = _duckdb(paths)
    assert [t.num_rows for t in scanned] == [t.num_rows for t in expected]
    for got, want in zip(scanned, expected):
        assert got.schema == want.schema
        assert _rows(got) == _rows(want)
    return True


# --------------------------------------------------------------------------- generated rows

COLUMN_TYPES = dict(zip(SIDECAR_SCHEMA.names, SIDECAR_SCHEMA.types))
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=10)
floats = st.one_of(st.floats(), st.floats(min_value=-60, max_value=0), st.integers(-10**22, 10**22),
                   st.sampled_from([0.0, -0.0, 0, 1e-7, -1.1920928955078125e-07, 5e-324, 1e308]))
json_values = st.recursive(st.none() | st.booleans() | floats | texts,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
                           max_leaves=6)


def _value_of(kind: pa.DataType):
    if pa.types.is_list(kind):
        element = texts if pa.types.is_string(kind.value_type) else floats
        return st.none() | st.lists(st.none() | element, max_size=6)
    if pa.types.is_string(kind):
        return st.none() | texts
    if pa.types.is_integer(kind):
        return st.none() | st.integers(-2**63, 2**63 - 1)
    return st.none() | floats


@st.composite
def rows(draw):
    keys = draw(st.lists(st.sampled_from(SIDECAR_SCHEMA.names), unique=True))
    row = {key: draw(_value_of(COLUMN_TYPES[key])) for key in keys}
    extra = draw(st.dictionaries(texts.filter(lambda k: k not in COLUMN_TYPES), json_values, max_size=3))
    items = list(row.items()) + list(extra.items())
    order = draw(st.permutations(range(len(items))))
    return {items[i][0]: items[i][1] for i in order}


@st.composite
def sidecar_texts(draw):
    lines = []
    for row in draw(st.lists(rows(), max_size=5)):
        separators = draw(st.sampled_from([(", ", ": "), (",", ":"), (" ,  ", " :\t")]))
        lines.append(json.dumps(row, ensure_ascii=draw(st.booleans()), separators=separators))
        if draw(st.integers(0, 9)) == 0:
            lines.append(draw(st.sampled_from(["", "  ", "\t \r"])))  # a blank line
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = newline.join(lines)
    return text + newline if lines and draw(st.booleans()) else text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(sidecar_texts(), min_size=1, max_size=3))
def test_the_scanner_gives_duckdbs_table_or_stands_aside(tmp_path_factory, files):
    folder = tmp_path_factory.mktemp("sidecars")
    paths = []
    for i, text in enumerate(files):
        path = folder / f"f{i}.jsonl"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    _assert_same(paths)


def test_what_agentuq_and_the_simulator_write_is_in_scope(tmp_path):
    """The forms the scanner exists for: agentuq's rows (every key its writer puts, non-ASCII escaped) and
    the simulator's (``write_sidecar``, UTF-8 kept), with tokens of every kind and blank-free files."""
    results = write_synthetic_results(tmp_path / "synthetic", num_simulations=6, messages_per_simulation=9,
                                      tokens_per_message=30, forms=("sidecar",), seed=5)
    agentuq = sorted((results.parent / "sidecars").glob("*.jsonl"))
    rng = np.random.default_rng(0)
    tokens = ["Hello", " wörld", "😀", "\n", '"', "\\", "{\"name\":", "\t", "é", "Ġthe", "<tool_call>", "\u2028"]
    simulator = tmp_path / "simulator.jsonl"
    write_sidecar(simulator, [
        make_token_row(domain="bookshop", task_id="3", trial=1, seed=7, role=role, turn_idx=t, message_idx=t,
                       token_idx=i, token=tokens[i % len(tokens)], chosen_logprob=float(-rng.exponential()),
                       topk_tokens=tokens[:5], topk_logprobs=sorted((-rng.exponential(size=5)).tolist(), reverse=True),
                       model="smollm2", scorer="self", source="generated", full_entropy=float(rng.random()),
                       message_timestamp=f"2026-01-01T00:00:{t:02d}")
        for t, role in enumerate(["assistant", "user", "assistant"]) for i in range(40)])
    assert _assert_same(agentuq + [simulator])


# --------------------------------------------------------------------------- numbers

def _scan_number(tmp_path: Path, text: str) -> float | None:
    path = tmp_path / "number.jsonl"
    path.write_text('{"chosen_logprob": ' + text + "}\n")
    scanned = scan_sidecars([path])
    return None if scanned is None else scanned[0].column("chosen_logprob")[0].as_py()


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_numbers_are_read_as_python_reads_them(tmp_path, x):
    got = _scan_number(tmp_path, repr(x))
    if got is None:  # only a subnormal may be left to DuckDB
        assert x != 0 and abs(x) < 2.2250738585072014e-308
    else:
        assert struct.pack("<d", got) == struct.pack("<d", x)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.floats(min_value=1e-12, max_value=1e12), st.integers(15, 24), st.sampled_from([-1, 0, 1]), st.booleans())
def test_numbers_near_halfway_points_are_correctly_rounded(tmp_path, x, digits, nudge, negative):
    """Decimal strings at and beside the exact midpoint between a double and the next: where one rounding
    in extended precision can differ from rounding once (the scanner then asks strtod)."""
    midpoint = (Fraction(x) + Fraction(math.nextafter(x, math.inf))) / 2
    with localcontext() as ctx:
        ctx.prec = digits
        text = str(Decimal(midpoint.numerator) / Decimal(midpoint.denominator))
        if nudge:
            last = Decimal(text).as_tuple()
            text = str(Decimal(text) + nudge * Decimal((0, (1,), last.exponent)))
    text = ("-" if negative else "") + text.replace("E", "e")
    if "e" not in text and "." not in text:
        text += ".0"  # an integer would be read as one first
    assert _scan_number(tmp_path, text) == float(text)


@pytest.mark.parametrize("text,expected", [
    ("-0", 0.0), ("-0.0", -0.0), ("0", 0.0), ("1E2", 100.0), ("1e-7", 1e-7), ("-Infinity", -math.inf),
    ("123456789012345678901234567890", 1.2345678901234568e29), ("0.30000000000000004", 0.30000000000000004),
    ("9007199254740993", 9007199254740992.0), ("2.2250738585072014e-308", 2.2250738585072014e-308),
])
def test_number_forms(tmp_path, text, expected):
    got = _scan_number(tmp_path, text)
    assert struct.pack("<d", got) == struct.pack("<d", expected)  # "-0" is DuckDB's 0.0: read as an integer first
    assert _assert_same([tmp_path / "number.jsonl"])


# --------------------------------------------------------------------------- beyond the scanner's scope

OUT_OF_SCOPE = [  # (the file's bytes, what DuckDB does with them)
    (b'{"token": 3}\n', "cast"),
    (b'{"trial": "3", "seed": 4.0}\n', "cast"),
    (b'{"chosen_logprob": true}\n', "cast"),
    (b'{"topk_tokens": ["a", 3]}\n', "cast"),
    (b'{"token_idx": 1, "extra": [1,]}\n', "trailing comma"),
    (b'{"token_idx": 1,}\n', "trailing comma"),
    ('\ufeff{"token": "bom"}\n'.encode(), "byte-order mark"),
    (b'{"chosen_logprob": nan}\n', "lower-case nan"),
    (b'{"chosen_logprob": 1e400}\n', "overflow"),
    (b'null\n{"token_idx": 1}\n', "a null line"),
    (b'{"token": "a\\u0000b"}\n', "NUL"),
    (b'{"tok\\u0065n": "escaped key"}\n', "an escaped key"),
    (b'{"token": "a", "token": "b"}\n', "refused: duplicate key"),
    (b'{"token": "\\ud83d"}\n', "refused: lone surrogate"),
    (b'{"token": "\xff"}\n', "refused: not UTF-8"),
    (b'{"token": "a\tb"}\n', "refused: control character"),
    (b'{"token": "a"} {"token": "b"}\n', "refused: two objects"),
    (b'{"token_idx": 01}\n', "refused: leading zero"),
    (b'{"token_idx": 1\n', "refused: not closed"),
]


@pytest.mark.parametrize("data,what", OUT_OF_SCOPE, ids=[w for _, w in OUT_OF_SCOPE])
def test_beyond_its_scope_duckdb_reads_or_refuses_as_before(tmp_path, data, what):
    good = tmp_path / "good.jsonl"
    good.write_text('{"token_idx": 0, "token": "x", "chosen_logprob": -0.5}\n')
    path = tmp_path / "odd.jsonl"
    path.write_bytes(data)
    assert scan_sidecars([good, path]) is None
    reader = SidecarReader(threads=1)
    if what.startswith("refused"):
        with pytest.raises(InputError) as scanned_first:
            reader.read([good, path], InputWarnings())
        with pytest.raises(InputError) as duckdb_only:
            SidecarReader(threads=1, scanner=False).read([good, path], InputWarnings())
        assert str(scanned_first.value) == str(duckdb_only.value)
        assert path.name in str(scanned_first.value)
    else:
        got = reader.read([good, path])
        assert [_rows(t) for t in got] == [_rows(t) for t in _duckdb([good, path])]
    reader.close()


def test_an_unknown_key_in_another_case_is_ignored_as_duckdb_does(tmp_path):
    path = tmp_path / "case.jsonl"
    path.write_text('{"Token": "a", "TOKEN_IDX": 3, "token_idx": 1}\n')
    assert _assert_same([path])


def test_lines_longer_than_the_read_block(tmp_path):
    """The scanner reads a file in blocks of whole lines; a line longer than a block grows it."""
    path = tmp_path / "long.jsonl"
    long_token = "ab\\u00e9" * 3000  # a line of ~24 kB, escapes across every block boundary
    path.write_text("".join(json.dumps({"token_idx": i, "token": long_token * (i % 3), "topk_logprobs": [-0.1] * i}) + "\n"
                            for i in range(50)))
    default = sidecar_scan.scan([bytes(path)])
    small = sidecar_scan.scan([bytes(path)], block_bytes=4096)
    assert bytes(default[0]) == bytes(small[0]) and bytes(default[1]) == bytes(small[1])
    assert all(bytes(a) == bytes(b) for col_a, col_b in zip(default[2], small[2])
               for a, b in zip(col_a, col_b) if a is not None)
    assert _assert_same([path])


MUTATION_BYTES = b'{}[]:,"\\/ \t\r\n0123456789.-+eEaeflnrstuINfy\x00\x1f\x7f\xc3\xa9\xff\xed\xa0\x80'


def test_mutated_rows_are_read_as_duckdb_reads_them_or_left_to_it(tmp_path):
    """Seeded byte mutations of real agentuq rows (a flip, an insertion, a deletion, a cut): the scanner's
    table equals DuckDB's, or it stands aside; never does it accept what DuckDB refuses."""
    results = write_synthetic_results(tmp_path / "src", num_simulations=1, messages_per_simulation=3,
                                      tokens_per_message=4, forms=("sidecar",), seed=9)
    lines = next((results.parent / "sidecars").glob("*.jsonl")).read_bytes().splitlines(keepends=True)
    rng = np.random.default_rng(17)
    accepted = refused = 0
    for case in range(300):
        data = bytearray(b"".join(lines[: rng.integers(1, len(lines) + 1)]))
        for _ in range(rng.integers(1, 4)):
            at, kind = int(rng.integers(0, len(data))), rng.integers(0, 4)
            byte = MUTATION_BYTES[int(rng.integers(0, len(MUTATION_BYTES)))]
            if kind == 0:
                data[at] = byte
            elif kind == 1:
                data.insert(at, byte)
            elif kind == 2:
                del data[at]
            else:
                del data[at:]
            if not data:
                data = bytearray(b"\n")
        path = tmp_path / f"case{case}.jsonl"
        path.write_bytes(bytes(data))
        scanned = _scanned_per_file([path])
        try:
            expected = _duckdb([path])
        except InputError:
            refused += 1
            assert scanned is None, f"the scanner accepted what DuckDB refuses: {bytes(data)!r}"
            continue
        if scanned is not None:
            accepted += 1
            assert _rows(scanned[0]) == _rows(expected[0]), bytes(data)
    assert accepted > 30 and refused > 30  # both sides of the contract were exercised


def test_a_path_with_a_nul_byte_is_refused_not_cut(tmp_path):
    (tmp_path / "a").write_text('{"token_idx": 1}\n')
    with pytest.raises(ValueError, match="null byte"):
        sidecar_scan.scan([bytes(tmp_path / "a") + b"\x00.jsonl"])


def test_a_file_that_cannot_be_opened_is_left_to_duckdb(tmp_path):
    missing = tmp_path / "missing.jsonl"
    assert scan_sidecars([missing]) is None
    with pytest.raises(InputError, match="missing.jsonl"):
        SidecarReader(threads=1).read([missing], InputWarnings())
