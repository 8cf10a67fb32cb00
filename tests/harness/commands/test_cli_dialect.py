"""One dialect (issue 32, item 4): --version, names read case- and separator-blind with a "did you
mean" otherwise, --json's one object on a usage error, the old flag spellings kept with a warning,
short helps with an example. Parsed in process: nothing here runs a case."""
import json

import pytest

from normdiff import __version__
from normdiff.harness.commands import cli

CHECK = ["check", "tests/fixtures/user/numpy_norms.py:rms_norm"]


def parse(*argv):
    return cli._parser().parse_args(list(argv))


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"normdiff {__version__}"


@pytest.mark.parametrize("typed", ["qwen-3", "Qwen3", "QWEN3"])
def test_a_convention_typed_another_way_is_accepted(typed):
    assert parse(*CHECK, "--op", "RMS-norm", "-c", typed).convention == "qwen3"


def test_a_misspelled_implementation_suggests_one_name_in_one_line(capsys):
    assert cli.main(["run", "-i", "nmupy"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("normdiff: error")]
    assert len(errors) == 1 and "did you mean 'numpy'?" in errors[0] and errors[0].count(", ") <= 2  # not the list


def test_a_bug_typed_with_underscores_resolves():
    assert parse("explain", "eps_outside_sqrt").bug == "eps-outside-sqrt"


def test_other_names_resolve_too():
    args = parse(*CHECK, "--op", "rms_norm", "-c", "qwen3", "--dtype", "BF16", "--regime", "Tiny-RMS:1e-3",
                 "--suite", "Smoke")
    assert (args.dtypes, args.regimes, args.suite) == (["bfloat16"], ["tiny_rms:1e-3"], "smoke")
    assert parse("list", "Conventions").what == "conventions"


def test_check_json_with_a_misspelled_op_prints_one_json_error(capsys):
    assert cli.main([*CHECK, "--op", "rmsnrom", "-c", "qwen3", "--json"]) == 2
    out = capsys.readouterr()
    reply = json.loads(out.out)  # one object: json.loads refuses anything after it
    assert reply["exit_code"] == 2 and "did you mean 'rms_norm'" in reply["error"] and out.err == ""


def test_a_usage_error_without_json_keeps_stdout_empty(capsys):
    assert cli.main([*CHECK, "--op", "rmsnrom", "-c", "qwen3"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "usage: normdiff check" in out.err and "did you mean 'rms_norm'" in out.err


@pytest.mark.parametrize("argv, old, new", [
    (["run", "--with", "a.py:f", "--op", "rms_norm", "--convention", "qwen3"], "--with", "--target"),
    (["run", "--with-command", "cat", "--op", "rms_norm", "--convention", "qwen3"], "--with-command", "--command"),
    (["fuzz", "--with", "a.py:f", "--op", "rms_norm", "--convention", "qwen3"], "--with", "--target"),
    (["model", "--family", "qwen3", "--norm", "a.py:Norm"], "--norm", "--target norm=TARGET"),
])
def test_an_old_spelling_still_works_and_warns(capsys, argv, old, new):
    args = parse(*argv)
    assert f"{old} is deprecated; write {new}" in capsys.readouterr().err
    got = args.withs[0] if argv[0] == "run" else vars(args)
    assert argv[2] in got.values()


def test_the_new_spelling_does_not_warn(capsys):
    args = parse("run", "--target", "a.py:f", "--op", "rms_norm", "--convention", "qwen3")
    assert args.withs == [{"target": "a.py:f", "op": "rms_norm", "convention": "qwen3"}]
    assert parse(*CHECK[:1], "--target", CHECK[1], "--op", "rms_norm", "-c", "qwen3").target_flag == CHECK[1]
    assert parse("model", "--family", "qwen3", "--target", "norm=a.py:Norm").targets == ["norm=a.py:Norm"]
    assert capsys.readouterr().err == ""




def help_of(capsys, *argv) -> str:
    with pytest.raises(SystemExit):
        parse(*argv, "--help")
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines where it likes


@pytest.mark.parametrize("sub", ["run", "repro", "check", "explain", "fuzz", "weights", "model", "list"])
def test_each_subcommand_help_shows_an_example(capsys, sub):
    assert f"example: normdiff {sub} " in help_of(capsys, sub)


def test_the_top_level_help_summarises_each_subcommand(capsys):
    text = help_of(capsys)
    assert all(f" {sub} " in text for sub in ["run", "repro", "check", "explain", "fuzz", "weights", "model", "list"])


def test_explain_pass_help_names_no_command_it_has_not(capsys):
    assert "--command" not in help_of(capsys, "explain")
    assert "a --command is a forward" in help_of(capsys, "check")


@pytest.mark.parametrize("sub", ["run", "repro", "explain", "check", "fuzz", "model", "weights", "list"])
def test_every_reporting_command_takes_json(sub):
    argv = {"repro": ["x", "-i", "numpy"], "weights": ["ckpt"], "list": ["ops"],
            "check": ["--op", "rms_norm", "-c", "qwen3"]}.get(sub, [])
    assert parse(sub, *argv, "--json").json is True
