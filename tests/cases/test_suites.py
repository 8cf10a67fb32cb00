import pytest

from normdiff.cases import regimes, suites
from normdiff.harness.data.conventions import op_conventions


def test_default_suite_is_large_and_covers_the_catalogue():
    suite = suites.load("default")
    assert len(suite) >= 300
    cases = suite.cases
    assert {(c.op, c.convention) for c in cases} >= {p for p in op_conventions() if p[1] in ("qwen3", "qwen3.5", "olmo2")}
    assert {c.dtype for c in cases} == {"float32", "bfloat16", "float16"}
    widths = {c.width for c in cases if c.op == "rms_norm"}
    assert {128, 1024, 4096} <= widths and any(w % 2 for w in widths)
    used = {regimes.split(c.regime)[0] for c in cases}
    assert used == set(regimes.INPUT_REGIMES)  # every regime is exercised
    assert {c.regime for c in cases} >= {f"tiny_rms:{s}" for s in ("1e-2", "1e-3", "3e-4", "1e-4")}
    assert {c.choice("weight") for c in cases if c.op == "rms_norm"} == set(regimes.WEIGHT_REGIMES)
    assert {c.choice("gate") for c in cases if c.op == "gated_rms_norm"} == set(regimes.GATE_REGIMES)
    assert len({c.id for c in cases}) == len(cases)


def test_smoke_suite_is_small():
    assert 10 <= len(suites.load("smoke")) <= 60


def test_the_shipped_suites_pass_the_schema_with_their_cases_unchanged():
    # the schema and the size limits refuse nothing the shipped suites hold (1651 forward cases and
    # 449 backward ones in the default suite, 74 of them in memory layouts; 55 in smoke; 7 in large,
    # of 65537 rows each)
    default = suites.load("default")
    assert (len(suites.for_pass(default, "forward")), len(suites.for_pass(default, "backward"))) == (1651, 449)
    assert len(suites.load("smoke")) == 55
    large = suites.load("large")
    assert len(large) == 7 and {c.rows for c in large.cases} == {65537} and all(c.width & (c.width - 1) for c in large.cases)
    assert len(suites.load("kernel")) == 332


def write(tmp_path, text):
    path = tmp_path / "s.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, message", [
    ("[[group]\n", "not valid TOML"),
    ("description = 'x'\n", "no \\[\\[group\\]\\] tables"),
    ("[[group]]\nops=['rms_norm']\n", "group 1: 'conventions' is missing"),
    ("[[group]]\nops=['rms_norm']\nconventions=['qwen3']\ndtypes=['float32']\nshapes=['8x8']\nregimes=['normal']\ncolour=1\n",
     "group 1: unknown key 'colour'; a group's keys are: ops, conventions"),
    ("[[group]]\nops=['qk_norm']\nconventions=['qwen3']\ndtypes=['float32']\nshapes=['8x8']\nregimes=['normal']\n",
     "group 1: qk_norm shapes are rows x heads x head_dim"),
    ("[[group]]\nops=['rms_norm']\nconventions=['qwen9']\ndtypes=['float32']\nshapes=['8x8']\nregimes=['normal']\n",
     "unknown convention 'qwen9'"),
])
def test_malformed_suites_say_what_is_wrong(tmp_path, text, message):
    with pytest.raises(suites.SuiteError, match=message):
        suites.load(write(tmp_path, text))


def test_unknown_suite_lists_the_known_ones():
    with pytest.raises(suites.SuiteError, match="known: default, kernel, large, smoke"):
        suites.load("nightly")


def test_overlapping_groups_run_each_case_once(tmp_path):
    group = "[[group]]\nops=['rms_norm']\nconventions=['qwen3']\ndtypes=['float32']\nshapes=['8x8']\nregimes=['normal']\n"
    assert len(suites.load(write(tmp_path, group + group))) == 1


def test_the_old_inputs_key_still_reads_with_a_warning(tmp_path):
    old = "[[group]]\nops=['rms_norm']\nconventions=['qwen3']\ndtypes=['float32']\nshapes=['8x8']\ninputs=['tiny_rms:1e-3']\n"
    with pytest.warns(FutureWarning, match="'inputs' is now called 'regimes'"):
        suite = suites.load(write(tmp_path, old))
    assert [c.regime for c in suite.cases] == ["tiny_rms:1e-3"]
    both = old + "regimes=['normal']\n"
    with pytest.raises(suites.SuiteError, match="both 'inputs' and 'regimes'"):
        suites.load(write(tmp_path, both))


def test_a_group_expands_from_python_as_from_a_file():
    cases = suites.expand(dict(ops=["rms_norm", "l2_norm"], conventions=["qwen3.5"], dtypes=["bfloat16"],
                               shapes=["4x64"], regimes=["normal"], weights=["trained", "ones"]))
    # the weight regimes multiply rms_norm's cases; l2_norm takes no weight and ignores them
    assert [c.id for c in cases] == ["rms_norm@qwen3.5/bf16/4x64/normal/w=trained",
                                     "rms_norm@qwen3.5/bf16/4x64/normal/w=ones", "l2_norm@qwen3.5/bf16/4x64/normal"]


def test_a_suite_is_made_once_per_process_and_again_when_its_file_changes(tmp_path):
    group = "[[group]]\nops=['rms_norm']\nconventions=['qwen3']\ndtypes=['float32']\nregimes=['normal']\nshapes={}\n"
    path = write(tmp_path, group.format("['4x64']"))
    before = suites.load(path)
    assert suites.load(path) is before  # made once
    write(tmp_path, group.format("['4x64', '4x96']"))
    assert len(suites.load(path)) == 2 * len(before)


def test_the_kernel_suite_has_masked_tails_their_twins_odd_row_counts_and_layouts():
    cases = suites.load("kernel").cases
    for op in {c.op for c in cases}:
        widths = {c.head_dim if c.op == "group_gated_rms_norm" else c.width for c in cases if c.op == op}
        assert any(w & (w - 1) for w in widths) and any(not w & (w - 1) for w in widths), op  # a tail, and its twin
    assert {1, 67} <= {c.rows for c in cases}
    assert {"padded", "strided", "transposed"} <= {c.layout for c in cases}
    assert {c.pass_ for c in cases} == {"forward", "backward"}
