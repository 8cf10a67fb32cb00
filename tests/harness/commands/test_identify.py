"""`normdiff check TARGET --op OP` without --convention: the conventions the code agrees with, or the
closest and what differs, the user's code called once per distinct call whatever the number of
conventions, and the exit status (0 agrees with one, 1 with none, 2 cannot run)."""
import ast
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from normdiff import wording
from normdiff.harness.commands.check import check_suite
from normdiff.harness.data.conventions import defining, get_contract
from normdiff.implementations import user

FIX = "tests/fixtures/user"
ROOT = Path(__file__).resolve().parents[3]
ENTRY_KEYS = {"convention", "verdict", "passed", "total", "disagree", "error", "worst_ulp", "budget_ulp",
              "share_of_budget", "bug", "diagnosis", "message"}


def identify(target, op, *args, env=None):
    """`normdiff check TARGET --op OP ARGS` run as a user runs it (no TARGET where it is None: a
    --command in ARGS): its exit status and stdout."""
    given = [target] if target is not None else []
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", "check", *given, "--op", op, *args],
                          capture_output=True, text=True, timeout=600, env=env)
    assert not proc.stderr.strip() or proc.returncode in (0, 1, 2), proc.stderr
    return proc.returncode, proc.stdout


def identify_json(target, op, *args, env=None):
    code, out = identify(target, op, *args, "--json", env=env)
    lines = out.strip().splitlines()
    assert len(lines) == 1, out  # exactly one JSON object
    return code, json.loads(lines[0])


def sharing(op: str, convention: str) -> list[str]:
    """The conventions whose contract for `op` is `convention`'s, up to the eps (which cases give)."""
    own = get_contract(op, convention)
    return [name for name in defining(op) if get_contract(op, name).replace(eps=own.eps) == own]


def test_the_llama_way_agrees_with_every_convention_of_llamas_contract():
    code, found = identify_json(f"{FIX}/numpy_norms.py:rms_norm", "rms_norm")
    assert sharing("rms_norm", "llama") == ["qwen3", "llama", "deepseek-v3", "vllm"]
    assert code == 0 and found["verdict"] == "agrees", found["answer"]
    assert found["agrees"] == sharing("rms_norm", "llama") and found["closest"] == []
    assert found["answer"] == "agrees with: qwen3, llama, deepseek-v3, vllm (rms_norm)"
    # the conventions that round once disagree by that rounding (their budget is one rounding's)
    entries = {e["convention"]: e for e in found["conventions"]}
    assert entries["olmo2"]["verdict"] == "disagrees" and "Llama cast" in entries["olmo2"]["bug"]


def test_a_gemma_style_norm_is_identified_as_gemma():
    code, found = identify_json(f"{FIX}/numpy_identify.py:gemma_rms_norm", "rms_norm")
    assert code == 0 and "gemma3" in found["agrees"], found["answer"]
    assert found["agrees"] == sharing("rms_norm", "gemma3") == ["qwen3.5", "qwen3-next", "gemma3"]
    # under a plain-gamma convention the diagnosis names the +1
    assert {e["convention"]: e["bug"] for e in found["conventions"]}["qwen3"] == "gamma-plus-one"


def test_a_buggy_norm_agrees_with_none_and_the_closest_names_its_bug():
    code, out = identify(f"{FIX}/numpy_norms.py:rms_norm_eps_outside", "rms_norm")
    assert code == 1, out
    lines = out.splitlines()
    # the answer first: the closest (the Llama contract's conventions) and the catalogued bug
    assert lines[0].startswith("agrees with no convention (rms_norm); closest: qwen3"), lines[0]
    closest = lines[0].split("closest: ")[1].split(" -- ")[0].split(", ")
    assert set(closest) <= set(sharing("rms_norm", "qwen3")), closest
    assert " -- differs by eps-outside-sqrt: yours: eps outside the square root" in lines[0]
    # then a row per convention, in conventions.py's order, and the rule that named the closest
    rows = [line.split()[0] for line in lines[3:3 + len(defining("rms_norm"))]]
    assert rows == defining("rms_norm"), out
    assert f"  {wording.CLOSEST_RULE}" in lines
    assert any(line.startswith("    repro: normdiff repro rms_norm@qwen3/") for line in lines), out
    # one diagnosis per contract (identify._shared), said with each convention's own name
    table = dict(zip(rows, lines[3:3 + len(rows)]))
    assert "where gemma3n has" in table["gemma3n"] and "where torch has" in table["torch"], out
    assert "where olmo2 has" in table["olmo2"], out


def test_the_llama_cast_with_one_plus_w_is_gemmas_contract_but_one_rounding():
    code, found = identify_json(f"{FIX}/numpy_norms.py:rms_norm_gamma_plus_one", "rms_norm")
    assert code == 1 and found["verdict"] == "disagrees" and found["agrees"] == []
    assert found["closest"] == sharing("rms_norm", "gemma3")
    assert found["differs"].startswith("differs: yours: the normalised value rounded to the input dtype before the "
                                       "weight multiply (Llama cast); qwen3.5: the weight multiplied in float32")
    assert found["answer"] == wording.agrees_with_none("rms_norm", found["closest"], found["differs"])
    # the closest by the rule: the most cases agree under it
    entries = {e["convention"]: e for e in found["conventions"]}
    best = max(e["passed"] / e["total"] for e in entries.values())
    assert all(entries[name]["passed"] / entries[name]["total"] == best for name in found["closest"])
    assert all(e["passed"] / e["total"] < best for name, e in entries.items() if name not in found["closest"])


def test_the_json_object_says_the_same_facts():
    code, found = identify_json(f"{FIX}/numpy_norms.py:rms_norm_gamma_plus_one", "rms_norm", "--dtype", "bfloat16")
    assert {"op", "verdict", "exit_code", "answer", "agrees", "closest", "closest_rule", "bug", "differs", "calls",
            "conventions", "framework", "target", "report"} <= set(found)
    assert found["op"] == "rms_norm" and found["exit_code"] == code and found["closest_rule"] == wording.CLOSEST_RULE
    assert [e["convention"] for e in found["conventions"]] == defining("rms_norm")
    for entry in found["conventions"]:
        assert set(entry) == ENTRY_KEYS
        assert 0 <= entry["passed"] <= entry["total"] and entry["verdict"] in ("agrees", "disagrees")
        assert (entry["verdict"] == "agrees") == (entry["passed"] == entry["total"])
    assert found["bug"] == {e["convention"]: e["bug"] for e in found["conventions"]}[found["closest"][0]]


def test_an_op_one_convention_defines():
    assert defining("group_gated_rms_norm") == ["mamba2"]
    code, found = identify_json(f"{FIX}/numpy_identify.py:mamba2_gated_norm", "group_gated_rms_norm")
    assert code == 0 and found["agrees"] == ["mamba2"], found["answer"]
    assert found["calls"] == {"made": found["conventions"][0]["total"], "shared": 0}  # nothing to share


def test_a_target_that_cannot_run_exits_2_saying_why():
    code, found = identify_json(f"{FIX}/numpy_norms.py:raises", "rms_norm", "--dtype", "float32")
    assert code == 2 and found["verdict"] == "error" and "my norm is broken" in found["answer"]
    code, found = identify_json(f"{FIX}/nope.py:rms_norm", "rms_norm")
    assert code == 2 and "file not found" in found["message"] and found["conventions"] == []


def _logged(tmp_path: Path, name: str, *args) -> tuple[dict, list[str]]:
    """check of logged_rms_norm (ARGS: --convention or not) and the digests of the calls it received."""
    log = tmp_path / f"{name}.log"
    env = dict(os.environ, NORMDIFF_TEST_CALLS=str(log))
    code, found = identify_json(f"{FIX}/numpy_identify.py:logged_rms_norm", "rms_norm", "--dtype", "bfloat16",
                                "--regime", "normal", *args, env=env)
    assert code in (0, 1), found
    return found, [line.split()[0] for line in log.read_text().splitlines()]


def test_the_code_is_called_once_per_distinct_call_not_once_per_convention(tmp_path):
    found, calls = _logged(tmp_path, "identify")
    judged = sum(e["total"] for e in found["conventions"])
    assert found["calls"]["made"] + found["calls"]["shared"] == judged  # one outcome per case: a forward
    assert max(Counter(calls).values()) == 1, "the same call was made twice"
    # exactly the calls the ten checks make, each made once
    each = {name: _logged(tmp_path, name, "--convention", name)[1] for name in defining("rms_norm")}
    assert set(calls) == set().union(*each.values())
    assert len(calls) < sum(map(len, each.values())) / 2, (len(calls), {k: len(v) for k, v in each.items()})


def _contract_reads(tree: ast.Module, cls: ast.ClassDef) -> set[str]:
    """The `contract.KNOB` attributes a class's methods read, and the module's functions and the
    class's methods they call (by name, transitively) read."""
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    todo, seen, read = list(methods.values()), set(), set()
    while todo:
        node = todo.pop()
        if node.name in seen:
            continue
        seen.add(node.name)
        for n in ast.walk(node):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "contract":
                read.add(n.attr)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in functions:
                todo.append(functions[n.func.id])
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in methods:
                todo.append(methods[n.func.attr])
    return read


def test_each_adapter_sees_every_knob_its_call_reads():
    """An adapter's `sees` decides that two conventions' cases are one call: every `contract.KNOB`
    its call reads must be in it, and the contract goes to nothing outside implementations/user.py."""
    tree = ast.parse((ROOT / "implementations" / "user.py").read_text())
    adapters = [n for n in tree.body if isinstance(n, ast.ClassDef) and hasattr(getattr(user, n.name), "sees")]
    assert {a.name for a in adapters} == {"FunctionAdapter", "ClassAdapter", "GraphAdapter"}
    for cls in adapters:
        read = _contract_reads(tree, cls)
        assert read and read <= set(getattr(user, cls.name).sees), (cls.name, read)
    assert set(user.FunctionAdapter.sees) < set(user.ClassAdapter.sees)  # a module is shaped by more
    defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        given = [*call.args, *(k.value for k in call.keywords)]
        if any(isinstance(a, ast.Name) and a.id == "contract" for a in given):
            callee = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            assert callee in defined, f"the contract goes to {ast.unparse(call.func)}, outside user.py"


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "qk_norm"])
def test_the_conventions_of_an_op_are_those_that_define_it(op):
    names = defining(op)
    assert names and all(get_contract(op, name).op == op for name in names)


@pytest.mark.slow
def test_a_command_is_told_each_calls_contract_and_shares_calls_only_within_one():
    """A command is told the whole contract (and the conventions whose contract it is): the protocol
    checker computes what it is told, so it agrees with every convention, and a call is shared only
    by the cases of one contract (eps included) on the same inputs."""
    program = f"{sys.executable} tests/fixtures/command_program.py correct"
    filters = ("--dtype", "bfloat16", "--regime", "normal")
    code, found = identify_json(None, "rms_norm", "--command", program, *filters)
    assert code == 0 and found["agrees"] == defining("rms_norm"), found["answer"]
    cases = [c for name in defining("rms_norm") for c in check_suite("default", "rms_norm", name, dtypes=("bfloat16",),
                                                                     regimes=("normal",)).cases
             if c.layout == "contiguous" and c.pass_ == "forward"]  # a command: no strides, a forward
    draws = {c: "/".join(p for p in c.id.split("/")[1:] if not p.startswith("eps=")) for c in cases}
    assert found["calls"] == {"made": len({(c.contract, draws[c]) for c in cases}),
                              "shared": len(cases) - len({(c.contract, draws[c]) for c in cases})}
