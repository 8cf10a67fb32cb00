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
    result.stdout.fnmatch_lines(["*looks like gamma-plus-one*", "*fix: yours: (1 + w) as the scale*",
                                 "*worst case: rms_norm@qwen3/*", "*needs a module-level function*"])


def test_fixture_takes_a_library_function_and_check_options(pytester):
    pytest.importorskip("mlx.core")
    pytester.makepyfile(test_lib="""
        import mlx.core as mx

        def test_mlx(normdiff):
            result = normdiff.check(mx.fast.rms_norm, op="rms_norm", convention="qwen3", dtypes=["bfloat16"],
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


def test_an_unknown_convention_fails_the_test_with_the_known_ones():
    from normdiff.harness.commands.pytest_plugin import Checker

    with pytest.raises(pytest.fail.Exception, match="qwen3"):
        Checker().check(str(USER) + ":rms_norm", op="rms_norm", convention="qwen9")


def test_one_dtype_or_regime_as_a_string_means_that_one():
    from normdiff.harness.commands.pytest_plugin import Checker

    result = Checker().check(str(USER) + ":rms_norm", op="rms_norm", convention="qwen3", dtypes="bfloat16",
                             regimes="normal", timeout=30)
    from normdiff.cases.suites import for_pass
    from normdiff.harness.commands.check import check_suite

    # every bf16 forward rms_norm case of the default suite at a normal regime, whatever its
    # convention's (a NumPy function has no backward normdiff can take)
    wanted = len(for_pass(check_suite("default", "rms_norm", "qwen3", dtypes=("bfloat16",), regimes=("normal",)),
                          "forward").cases)
    assert result.verdict == "agrees" and result.cases["total"] == wanted >= 12
    assert {row["dtype"] for row in result.rows} == {"bfloat16"}
