"""normdiff.text's named number formats: each gives exactly the string the inline format spec it
replaced gave (reports, messages and the judge's details are compared byte for byte across runs),
on floats, NumPy scalars, integers, zeros, NaN and infinities; and the places `number` differs from
a bare spec on purpose (None and NaN as `missing`, integers as they are).

A structural test: no module of the package spells a float format spec of its own in a message
(they live here, under a name)."""
from __future__ import annotations

import ast
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from normdiff import text

VALUES = [0.0, -0.0, 1.0, 2.0, 0.5, 1 / 3, 2.0 / 3.0, 43.5625, 121.375, 5.4375, 1234.5678, 12345678.0, 1e-6,
          1.1920928955078125e-07, 1e6, 10000.0, -7.25, 0.999998765, np.float64(2.015625), np.float32(0.1),
          np.float16(3.14), math.inf, -math.inf]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_each_named_format_is_the_inline_spec_it_replaced(value):
    assert text.number(value) == f"{value:.3g}"
    assert text.number(value, 4) == f"{value:.4g}"
    assert text.number(value, 6) == f"{value:.6g}"
    assert text.precise(value) == f"{value:.6g}"
    assert text.general(value) == f"{value:g}"
    assert text.fixed(value, 2) == f"{value:.2f}"
    assert text.fixed(value, 6) == f"{value:.6f}"
    assert text.seconds(value) == f"{value:.1f} s"
    assert text.seconds(value, 2) == f"{value:.2f} s"
    assert text.ulps(value) == f"{value:.3g} ulp"
    assert text.ulps(value, 4) == f"{value:.4g} ulp"
    if math.isfinite(value):
        assert text.share(value) == f"{value:.0%}"
        assert text.share(value, 1) == f"{value:.1%}"


def test_nan_is_missing_for_number_and_nan_for_the_bare_specs():
    nan = float("nan")
    assert text.number(nan) == "" and text.number(None) == "" and text.number(np.float32(nan)) == ""
    assert text.number(nan, missing="nan") == f"{nan:.3g}" == "nan"  # where a bare spec showed it
    assert text.number(None, missing="n/a") == "n/a"
    assert text.precise(nan) == "-" and text.precise(None) == "-"
    assert text.ulps(nan, missing="nan") == "nan ulp"
    assert text.general(nan) == "nan" and text.fixed(nan, 6) == "nan" and text.share(nan) == "nan%"


def test_integers_and_booleans():
    # number writes an integer as it is; general, like Python's g, in its six digits
    assert text.number(12345678) == "12345678" and f"{12345678:.3g}" == "1.23e+07"
    assert text.number(np.int64(7)) == "7" and text.number(True) == "True"
    assert text.general(1000000) == "1e+06" == f"{1000000:g}"
    assert text.general(600) == "600" and text.seconds(3) == "3.0 s"


def test_examples():
    assert text.number(43.5625) == "43.6" and text.number(0.5) == "0.5" and text.number(2.0) == "2"
    assert text.precise(121.375) == "121.375" and text.precise(None) == "-"
    assert text.general(1e-6) == "1e-06" and text.general(1e6) == "1e+06" and text.general(0.5) == "0.5"
    assert text.fixed(0.9999987, 6) == "0.999999" and text.fixed(1.005, 2) == "1.00"
    assert text.share(0.99) == "99%" and text.share(0.1) == "10%" and text.share(0.995) == "100%"
    assert text.seconds(18.25) == "18.2 s" and text.seconds(0.1234, 2) == "0.12 s"
    assert text.ulps(43.5625) == "43.6 ulp" and text.ulps(121.375, 4) == "121.4 ulp"


def test_clipped_keeps_a_stated_length_and_counts_the_rest():
    assert text.clipped("x" * text.SHOWN) == "x" * text.SHOWN
    assert text.clipped("y" * (5 << 20)) == "y" * text.SHOWN + f"... ({(5 << 20) - text.SHOWN} more characters)"
    assert text.clipped("abcdef", 3) == "abc... (3 more characters)" and text.clipped(12345, 2) == "12... (3 more characters)"


def test_columns_are_right_aligned_with_their_digits():
    values = [0.123456, -1.23456, float("nan"), float("inf"), 3]
    assert text.columns(values, 10, 4) == " ".join(f"{v:>10.4g}" for v in values)
    assert text.columns(values, 10, 4) == "    0.1235     -1.235        nan        inf          3"
    assert text.columns(np.array([1.5, 2.25]), 12, 6) == "         1.5         2.25"
    assert text.columns([], 10, 4) == ""


# ---- no module spells a float format spec of its own --------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("normdiff", "harness", "cases", "implementations", "reports")
# a format spec that writes a float: optional fill/align, sign, width, grouping, precision, then a
# float presentation type (g G e E f F %): ".3g", "g", ".0%", ">10.4g", ".2f"
FLOAT_SPEC = re.compile(r"^(.?[<>^=])?[+\- ]?#?0?\d*[,_]?(\.\d+)?[gGeEfF%]$")
# the specs that stay, each by module and spec, with why; every entry must still be found (a stale
# one fails too).
KEPT = {
    ("normdiff/text.py", "g"): "the one place: text.general is f'{value:g}'",
    # a regime's name (part of a case id, parsed back by cases/regimes.py), not a number shown
    ("harness/commands/explain.py", ".3g"): "rms_sweep's regime id tiny_rms:{s:.3g}",
}


def float_specs() -> dict[tuple[str, str], int]:
    """(module path, spec) -> how often: every f-string field whose format spec writes a float,
    every format(value, spec) and every '%.3g' % value, in the package's modules."""
    found: dict[tuple[str, str], int] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                spec = None
                if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
                    spec = "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.format_spec.values)
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "format"
                      and len(node.args) == 2 and isinstance(node.args[1], ast.Constant)):
                    spec = str(node.args[1].value)
                elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
                      and isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)):
                    hit = re.search(r"%[-+ #0]*\d*(\.\d+)?([gGeEfF])", node.left.value)
                    spec = hit and (hit.group(1) or "") + hit.group(2)
                if spec and FLOAT_SPEC.match(spec):
                    found[(rel, spec)] = found.get((rel, spec), 0) + 1
    return found


def test_no_module_spells_a_float_format_of_its_own():
    found = float_specs()
    assert sorted(set(found) - set(KEPT)) == [], "use a named format of normdiff/text.py"
    assert sorted(set(KEPT) - set(found)) == [], "a kept spec is gone: drop it from KEPT"


def test_the_scan_sees_each_kind_of_spec(tmp_path, monkeypatch):
    """A planted module with each kind is found: f-string specs (aligned too), format(), %."""
    root = tmp_path / "repo"
    (root / "reports").mkdir(parents=True)
    (root / "reports" / "planted.py").write_text(
        'a = f"{x:.3g} {y:>10.4g} {z:.0%} {w:d} {v:<12}"\nb = format(x, ".2f")\nc = "%.1f s" % x\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", root)
    assert float_specs() == {("reports/planted.py", s): 1 for s in (".3g", ">10.4g", ".0%", ".2f", ".1f")}


def test_unbreakable_streams_escape_what_the_encoding_lacks_and_keep_undecodable_bytes(monkeypatch):
    """LANG=C without UTF-8 mode: stdout is ASCII. 'é' prints as its escape, never raising; a byte
    that came undecoded from a file name (surrogateescape's U+DC80..U+DCFF) prints as that byte."""
    import io
    import sys

    from normdiff import text

    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="surrogateescape")  # LANG=C's
    err = io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="strict")  # PYTHONIOENCODING=ascii's
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    text.unbreakable_streams()
    print("naïve — \udcff", file=out, flush=True)
    print("✓ ok", file=err, flush=True)
    assert out.buffer.getvalue() == b"na\\xefve \\u2014 \xff\n"
    assert err.buffer.getvalue() == b"\\u2713 ok\n"
