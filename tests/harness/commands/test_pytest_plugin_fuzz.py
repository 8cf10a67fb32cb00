"""The `normdiff` fixture fuzzes too: `normdiff.fuzz(fn, op=..., convention=...)` in a user's own test
suite (run by pytester in a fresh process) passes right code and fails wrong code with the shrunk
minimal case and its repro command."""
import shutil
from pathlib import Path

pytest_plugins = ["pytester"]
USER = Path(__file__).resolve().parents[2] / "fixtures" / "user" / "numpy_norms.py"


def test_the_fixture_fuzzes_right_and_wrong_code(pytester, monkeypatch, tmp_path):
    monkeypatch.setenv("NORMDIFF_HYPOTHESIS_CACHE", str(tmp_path / "cache"))
    shutil.copy(USER, pytester.path / "numpy_norms.py")
    pytester.makepyfile(test_mine="""
        from numpy_norms import rms_norm, rms_norm_gamma_plus_one

        def test_right(normdiff):
            result = normdiff.fuzz(rms_norm, op="rms_norm", convention="qwen3", max_examples=40, seed=0)
            assert not result.found and result.examples == 40

        def test_wrong(normdiff):
            normdiff.fuzz(rms_norm_gamma_plus_one, op="rms_norm", convention="qwen3", max_examples=200, seed=0,
                          dtypes="bfloat16")

        def test_not_a_function(normdiff):
            normdiff.fuzz(42, op="rms_norm", convention="qwen3")

        def test_unknown_convention(normdiff):
            normdiff.fuzz(rms_norm, op="rms_norm", convention="qwen9")
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(["*FOUND after * example*", "*minimal case  rms_norm@qwen3/bf16/1x1/normal/w=ones*",
                                 "*repro         normdiff repro rms_norm@qwen3/bf16/1x1/normal/w=ones --target "
                                 "*numpy_norms.py:rms_norm_gamma_plus_one",
                                 "*normdiff cannot fuzz 42*", "*unknown convention 'qwen9'*"])
    assert not (pytester.path / ".hypothesis").exists()
