"""Suite files are checked against the schema before any work: each fault a careless or hostile
suite can hold is refused with the file, the group, the key and the fix, never a traceback, a
silently empty grid or a machine out of memory."""
import subprocess
import sys

import pytest

from normdiff.cases import suites
from normdiff.cases.model import Case

GOOD = "ops=['rms_norm']\nconventions=['qwen3']\ndtypes=['float32']\nshapes=['8x8']\nregimes=['normal']\n"
FIRST = "[[group]]\n" + GOOD  # a valid group 1, so each fault below is in group 2


def group(**changes) -> str:
    """A second group: GOOD with keys replaced (value None: left out) or added (TOML text values)."""
    lines = dict(line.split("=", 1) for line in GOOD.splitlines())
    for key, value in changes.items():
        if value is None:
            lines.pop(key)
        else:
            lines[key] = value
    return FIRST + "[[group]]\n" + "".join(f"{k}={v}\n" for k, v in lines.items())


def write(tmp_path, text: str) -> str:
    path = tmp_path / "bad_suite.toml"
    path.write_text(text)
    return str(path)


FAULTS = [  # (id, suite text, where the message says the fault is, what else it must say)
    ("misspelt [[groups]]", "[[groups]]\n" + GOOD, "bad_suite.toml:",
     ["unknown top-level key 'groups'", "did you mean 'group'?"]),
    ("misspelt description", "descripton='x'\n" + FIRST, "bad_suite.toml:",
     ["unknown top-level key 'descripton'", "did you mean 'description'?", "description, group"]),
    ("description not a string", "description=3\n" + FIRST, "bad_suite.toml:", ["'description' must be a string"]),
    ("[group] not [[group]]", "[group]\n" + GOOD, "bad_suite.toml:", ["array of tables", "[[group]]"]),
    ("unknown group key", group(wieghts="['trained']"), "group 2",
     ["unknown key 'wieghts'", "did you mean 'weights'?", "ops, conventions, dtypes"]),
    ("missing key", group(ops=None), "group 2", ["'ops' is missing", 'ops = ["rms_norm"]']),
    ("bare string for a list", group(weights="'trained'"), "group 2",
     ["'weights' must be a list of strings", 'weights = ["trained"]', "the string 'trained'"]),
    ("empty list", group(dtypes="[]"), "group 2", ["'dtypes' is an empty list", "dtypes = ["]),
    ("non-string element", group(dtypes="[32]"), "group 2", ["'dtypes' must be a list of strings", "integer 32"]),
    ("samples a string", group(samples="'3'"), "group 2", ["'samples' must be a whole number", "string '3'"]),
    ("samples a boolean", group(samples="true"), "group 2", ["'samples' must be a whole number", "boolean true"]),
    ("samples a float", group(samples="2.0"), "group 2", ["'samples' must be a whole number", "number 2.0"]),
    ("samples zero", group(samples="0"), "group 2", ["from 1 to 1000", "integer 0"]),
    ("samples too many", group(samples="5000"), "group 2", ["from 1 to 1000", "integer 5000"]),
    ("float64: no budget", group(dtypes="['float64']"), "group 2",
     ["'dtypes'", "'float64' has no ULP budget", "float32, bfloat16, float16"]),
    ("unknown dtype", group(dtypes="['flaot32']"), "group 2", ["unknown dtype 'flaot32'", "did you mean 'float32'?"]),
    ("unknown op", group(ops="['rmsnorm']"), "group 2", ["'ops'", "unknown op 'rmsnorm'", "did you mean 'rms_norm'?"]),
    ("unknown weight", group(weights="['huge']"), "group 2", ["'weights'", "unknown weight regime 'huge'", "trained"]),
    ("unknown regime", group(regimes="['tiny_rm']"), "group 2", ["unknown input regime 'tiny_rm'", "'tiny_rms'"]),
    ("tiny_rms negative", group(regimes="['tiny_rms:-1']"), "group 2",
     ["'regimes'", "tiny_rms", "positive finite number", "got '-1'"]),
    ("tiny_rms zero", group(regimes="['tiny_rms:0']"), "group 2", ["positive finite number", "got '0'"]),
    ("tiny_rms not a number", group(regimes="['tiny_rms:abc']"), "group 2", ["positive finite number", "got 'abc'"]),
    ("mean_shift nan", group(regimes="['mean_shift:nan']"), "group 2", ["mean_shift", "finite number", "got 'nan'"]),
    ("mean_shift inf", group(regimes="['mean_shift:inf']"), "group 2", ["finite number", "got 'inf'"]),
    ("head_scales unknown", group(ops="['qk_norm']", shapes="['8x2x8']", regimes="['head_scales:flat']"), "group 2",
     ["'lognormal' or 'logspace'", "'flat'"]),
    ("eps a bare string", group(eps="'config'"), "group 2", ["'eps' must be a list", 'eps = ["config"]']),
    ("eps negative", group(eps="[-1e-5]"), "group 2", ["'eps'", "positive finite number", '"config"']),
    ("eps nan", group(eps="[nan]"), "group 2", ["'eps'", "number nan", "positive finite number"]),
    ("eps quoted", group(eps="['1e-5']"), "group 2", ["'eps'", "without quotes"]),
    ("shape zero", group(shapes="['0x8']"), "group 2", ["'shapes'", "'0x8'", "positive whole numbers", "'8x1024'"]),
    ("shape not numbers", group(shapes="['8xabc']"), "group 2", ["'8xabc'", "positive whole numbers"]),
    ("shape too wide", group(shapes="['8x2000000']"), "group 2", ["'shapes'", "at most 1048576 wide", "2000000"]),
    ("shape too many elements", group(shapes="['100000000x4096']"), "group 2",
     ["'shapes'", "at most 268435456 elements", "4.1e+11", "fewer rows"]),
    ("too much memory", group(shapes="['65536x4096']"), "bad_suite.toml:",
     ["needs about 50.5 GiB of memory", "65536x4096 in group 2", "the limit is 4 GiB", "NORMDIFF_MAX_SUITE_BYTES"]),
    ("too many cases", group(shapes="[" + ", ".join(f"'{n}x8'" for n in range(1, 201)) + "]", samples="1000"),
     "bad_suite.toml:", ["up to 200001 cases", "group 2 makes 200000", "the most is 100000"]),
    ("a pair the convention lacks", group(conventions="['torch']", ops="['qk_norm']", shapes="['8x2x8']"),
     "group 2", ["torch"]),
]


@pytest.mark.parametrize("text, where, says", [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
def test_a_faulty_suite_is_refused_with_the_file_group_key_and_fix(tmp_path, monkeypatch, text, where, says):
    monkeypatch.delenv("NORMDIFF_MAX_SUITE_BYTES", raising=False)
    with pytest.raises(suites.SuiteError) as caught:
        suites.load(write(tmp_path, text))
    message = str(caught.value)
    assert "bad_suite.toml" in message and where in message, message
    for words in says:
        assert words in message, message


def test_sizes_are_refused_before_any_case_is_made_or_drawn(tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("a case was made or drawn before the suite's size was checked")

    for name in ("inputs", "draw_float64", "of"):
        monkeypatch.setattr(Case, name, never)
    monkeypatch.setattr(suites, "_make_case", never)
    monkeypatch.delenv("NORMDIFF_MAX_SUITE_BYTES", raising=False)
    many = group(shapes="['1000x262144', '65536x4096']", dtypes="['float32', 'bfloat16', 'float16']",
                 samples="1000")
    most = r"needs about 292 TiB of memory \(the most: 3000 cases of 65536x4096 in group 2\)"
    with pytest.raises(suites.SuiteError, match=most):
        suites.load(write(tmp_path, many))
    with pytest.raises(suites.SuiteError, match="at most 268435456 elements"):
        suites.load(write(tmp_path, group(shapes="['100000000x4096']")))
    with pytest.raises(suites.SuiteError, match="needs about"):  # a Python group is checked the same way
        suites.expand(dict(ops=["rms_norm"], conventions=["qwen3"], dtypes=["float32"], shapes=["65536x4096"],
                           regimes=["normal"]))


def test_the_memory_limit_is_the_environments_when_set(tmp_path, monkeypatch):
    text = group(shapes="['65536x4096']")
    monkeypatch.setenv("NORMDIFF_MAX_SUITE_BYTES", str(2 ** 40))
    assert len(suites.load(write(tmp_path, text))) == 2  # cases are lazy: nothing is drawn
    monkeypatch.setenv("NORMDIFF_MAX_SUITE_BYTES", "1000")
    with pytest.raises(suites.SuiteError, match="the limit is 1e\\+03 B"):
        suites.load(write(tmp_path, FIRST))
    monkeypatch.setenv("NORMDIFF_MAX_SUITE_BYTES", "lots")
    with pytest.raises(suites.SuiteError, match="NORMDIFF_MAX_SUITE_BYTES must be a number of bytes"):
        suites.load(write(tmp_path, FIRST))


@pytest.mark.parametrize("changes, says", [
    (dict(weights="trained"), "'weights' must be a list of strings, e.g. weights = [\"trained\"]"),
    (dict(samples="3"), "'samples' must be a whole number"),
    (dict(colour=["red"]), "unknown key 'colour'"),
    (dict(regimes=["tiny_rms:-1"]), "positive finite number"),
])
def test_a_python_group_is_checked_as_a_file_group_is(changes, says):
    given = dict(ops=["rms_norm"], conventions=["qwen3"], dtypes=["float32"], shapes=["8x8"], regimes=["normal"])
    with pytest.raises(suites.SuiteError, match="^a Python group: ") as caught:
        suites.expand({**given, **changes})
    assert says in str(caught.value)


def test_the_regime_parameter_check_lives_with_the_regimes():
    from normdiff.cases import regimes
    from normdiff.harness.data.errors import UsageError
    for bad in ("tiny_rms:-1", "tiny_rms:0", "tiny_rms:abc", "mean_shift:nan", "mean_shift:inf", "head_scales:x"):
        with pytest.raises(UsageError):
            regimes.check_input_regime(bad, ("rows", "num_heads", "head_dim"))
    for good in ("tiny_rms:1e-3", "mean_shift:-3", "head_scales:logspace", "tiny_rms"):
        regimes.check_input_regime(good, ("rows", "num_heads", "head_dim"))
    with pytest.raises(UsageError, match="positive finite number"):
        Case.of("rms_norm", "qwen3", "float32", "8x8", regime="tiny_rms:-1")


def test_the_cli_refuses_a_faulty_suite_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "run", "--suite",
                           write(tmp_path, group(weights="'trained'")), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("normdiff: error: "), proc.stderr
    assert "Traceback" not in proc.stderr and "bad_suite.toml group 2" in lines[0] and "'weights'" in lines[0]
    assert not out.exists()
