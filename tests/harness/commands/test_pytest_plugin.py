"""The `normdiff` fixture in a user's own test suite (run by pytester in a fresh process)."""
import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
USER = Path(__file__).resolve().parents[2] / "fixtures" / "user" / "numpy_norms.py"


def test_fixture_passes_right_code_and_names_the_bug_of_wrong_code(pytester):
    shutil.copy(USER, pytester.path / "numpy_norms.py")
    pytester.makepyfile(test_mine="""
        from numpy_norms import rms_norm, rms_norm_gamma_plus_one

        def test_right(normdiff):
            normdiff.check(rms_norm, op="rms_norm", convention="qwen3")

        def test_wrong(normdiff):
            normdiff.check(rms_norm_gamma_plus_one, op="rms_norm", convention="qwen3")

        def test_lambda(normdiff):
            normdiff.check(lambda x, w, eps: x, op="rms_norm", convention="qwen3")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    # the answer first (the bug and its fix, the worst case), then the diagnosis's evidence
    result.stdout.fnmatch_lines(["*bug: gamma-plus-one -- fix: yours: (1 + w) as the scale*",
                                 "*worst case: rms_norm@qwen3/*", "*looks like gamma-plus-one*",
                                 "*needs a module-level function*"])


def test_a_failure_names_its_bug_in_the_short_summary_and_a_usage_error_has_no_chained_traceback(pytester):
    shutil.copy(USER, pytester.path / "numpy_norms.py")
    pytester.makepyfile(test_mine="""
        from numpy_norms import rms_norm, rms_norm_eps_outside

        def test_wrong(normdiff):
            normdiff.check(rms_norm_eps_outside, op="rms_norm", convention="qwen3", dtype="float32")

        def test_misspelled(normdiff):
            normdiff.check(rms_norm, op="rms_norm", convention="qwen9")
    """)
    # -vv: pytest writes the short summary's lines whole, not cut at the terminal's width
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-vv", "-rf")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "FAILED test_mine.py::test_wrong - Failed: normdiff check numpy_norms.py:rms_norm_eps_outside: disagrees, "
        "eps-outside-sqrt (* of * cases)",
        "FAILED test_mine.py::test_misspelled - Failed: normdiff cannot run numpy_norms.py:rms_norm: unknown "
        "convention 'qwen9'*"])
    # the body carries the command that replays the worst case, with the target where it lies
    result.stdout.fnmatch_lines([f"  repro: normdiff repro rms_norm@qwen3/fp32/* --target {pytester.path}/"
                                 "numpy_norms.py:rms_norm_eps_outside"])
    text = result.stdout.str()
    assert "During handling of the above exception" not in text and "Traceback" not in text, text


def test_the_fixture_needs_the_convention_and_says_how_to_find_it(pytester):
    """A test passes under the convention the code claims; check without one (the CLI's) identifies
    it, and a test that passed under whichever convention agrees would miss a drift between them."""
    shutil.copy(USER, pytester.path / "numpy_norms.py")
    pytester.makepyfile(test_mine="""
        from numpy_norms import rms_norm

        def test_unclaimed(normdiff):
            normdiff.check(rms_norm, op="rms_norm")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["normdiff.check needs convention=, the convention your code claims *; to find the "
                                 "ones it agrees with, run: normdiff check TARGET --op rms_norm (without --convention)"])


def test_fixture_takes_a_library_function_and_check_options(pytester):
    pytest.importorskip("mlx.core")
    pytester.makepyfile(test_lib="""
        import mlx.core as mx

        def test_mlx(normdiff):
            result = normdiff.check(mx.fast.rms_norm, op="rms_norm", convention="qwen3", dtype=["bfloat16"],
                                    regimes=["normal"])
            assert result.framework == "mlx" and {r["dtype"] for r in result.rows} == {"bfloat16"}

        def test_mlx_without_eps(normdiff):
            normdiff.check(mx.fast.rms_norm, op="rms_norm", convention="qwen3", call="f(x, weight, 1e-5)")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*looks like eps-wrong-value*"])


@pytest.mark.parametrize("given, says", [(abs, "abs is a Python built-in, not a normalization"),
                                          (42, "it is a value of type int, not a function or a class"),
                                          ("nosuch.py:f", "file not found: nosuch.py")])
def test_what_is_not_a_norm_fails_the_test_with_a_message_not_a_traceback(given, says):
    from normdiff.harness.commands.pytest_plugin import Checker

    with pytest.raises(pytest.fail.Exception, match=says) as failed:
        Checker().check(given, op="rms_norm", convention="qwen3")
    assert not failed.value.pytrace


@pytest.mark.parametrize("call, keywords, says", [
    ("check", {"op": 3}, "op must be an op name (a string), e.g. 'l2_norm'; got 3 (int)"),
    ("check", {"dtype": 3}, "dtype must be a name or a list of names (strings); got 3 (int)"),
    ("check", {"call": 3}, "call must be a string (a template such as 'f(x, weight, eps=eps)', or '' for none)"),
    ("fuzz", {"database": "yes"}, "database must be True or False; got 'yes' (str)"),
    ("fuzz", {"regimes": 3}, "regimes must be a name or a list of names (strings); got 3 (int)"),
], ids=["op", "dtype", "call", "database", "regimes"])
def test_a_wrong_keyword_fails_the_test_naming_it_before_any_work(call, keywords, says):
    from normdiff.harness.commands.pytest_plugin import Checker

    with pytest.raises(pytest.fail.Exception) as failed:
        getattr(Checker(), call)(str(USER) + ":rms_norm", **{"op": "rms_norm", "convention": "qwen3", **keywords})
    assert f"normdiff cannot {'run' if call == 'check' else 'fuzz'} " in str(failed.value)
    assert says in str(failed.value) and not failed.value.pytrace


def test_names_are_read_as_the_cli_reads_them_and_a_path_is_a_target(tmp_path):
    from normdiff.harness.commands.pytest_plugin import _target, Checker

    assert _target(tmp_path / "model.onnx") == str(tmp_path / "model.onnx")
    result = Checker().check(str(USER) + ":rms_norm", op="RMS_norm", convention="Qwen-3", dtype="bf16",
                             regimes="normal")
    assert result.verdict == "agrees" and (result.op, result.convention) == ("rms_norm", "qwen3")


def test_an_unknown_convention_fails_the_test_with_the_known_ones_and_no_chained_exception():
    from normdiff.harness.commands.pytest_plugin import Checker

    with pytest.raises(pytest.fail.Exception, match="qwen3") as failed:
        Checker().check(str(USER) + ":rms_norm", op="rms_norm", convention="qwen9")
    # the UsageError it was raised while handling is not shown again under it
    assert failed.value.__suppress_context__ and not failed.value.pytrace


def test_one_dtype_or_regime_as_a_string_means_that_one():
    from normdiff.harness.commands.pytest_plugin import Checker

    result = Checker().check(str(USER) + ":rms_norm", op="rms_norm", convention="qwen3", dtype="bfloat16",
                             regimes="normal", timeout=30)
    from normdiff.cases.suites import for_pass
    from normdiff.harness.commands.check import check_suite

    # every bf16 forward rms_norm case of the default suite at a normal regime, whatever its
    # convention's (a NumPy function has no backward normdiff can take)
    wanted = len(for_pass(check_suite("default", "rms_norm", "qwen3", dtypes=("bfloat16",), regimes=("normal",)),
                          "forward").cases)
    assert result.verdict == "agrees" and result.cases["total"] == wanted >= 12
    assert {row["dtype"] for row in result.rows} == {"bfloat16"}


def test_the_old_dtypes_keyword_still_works_with_a_deprecation_warning():
    from normdiff.harness.commands.pytest_plugin import Checker

    with pytest.warns(DeprecationWarning, match="use dtype="):
        result = Checker().check(str(USER) + ":rms_norm", op="rms_norm", convention="qwen3", dtypes="float16",
                                 regimes="normal", timeout=30)
    assert {row["dtype"] for row in result.rows} == {"float16"}
    with pytest.raises(pytest.fail.Exception, match="give dtype= only"):
        Checker().check(str(USER) + ":rms_norm", op="rms_norm", convention="qwen3", dtype="float16",
                        dtypes="float16")
