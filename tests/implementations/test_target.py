"""A user's target as one typed value: located and its source parsed once, what the source says
(an explicit backward, a class) decided once and read by every reader (the parent's passes, the
worker's adapters), carried on its Implementation and sent to a worker without its parsed tree."""
from __future__ import annotations

import ast
import pickle
import textwrap
from dataclasses import replace

import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.harness.commands.usercode import user_implementation
from normdiff.implementations.entry import Implementation
from normdiff.implementations.loading import make_adapter
from normdiff.implementations.target import TargetError, UserTarget, locate

CASE = Case.of("rms_norm", "qwen3", "float32", "4x64", weight="trained")
SOURCE = """
    import numpy as np

    def rms_norm(x, weight, eps):
        xf = x.astype(np.float32)
        return (xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + eps) * weight).astype(x.dtype)

    def rms_norm_backward(dy, x, weight, eps):
        return dy, dy[0]

    class Norm:
        def __init__(self, dim, eps):
            self.weight, self.eps = np.ones(dim, np.float32), eps

        def __call__(self, x):
            return rms_norm(x, self.weight, self.eps)

    if True:
        def nested_backward(dy, x, weight, eps):  # not a top-level def: its loaded signature decides
            return dy, dy[0]

    aliased = rms_norm_backward
    """


@pytest.fixture
def path(tmp_path) -> str:
    file = tmp_path / "mine.py"
    file.write_text(textwrap.dedent(SOURCE))
    return str(file)


@pytest.mark.parametrize("attr, explicit, is_class", [
    ("rms_norm", False, False), ("rms_norm_backward", True, False), ("Norm", False, True),
    ("nested_backward", None, False), ("aliased", None, False),
])
def test_what_the_source_says_is_decided_when_it_is_located(path, attr, explicit, is_class):
    target = locate(f"{path}:{attr}")
    assert (target.explicit_backward, target.is_class) == (explicit, is_class)
    assert isinstance(target.tree, ast.Module) and target.source == path and target.name == attr


def test_a_library_target_is_located_without_importing_it():
    target = locate("json:dumps")
    assert (target.module, target.attr, target.name) == ("json", "dumps", "json:dumps")
    assert target.source.endswith("json/__init__.py") and target.explicit_backward is False
    # a re-exported name: its source does not say; capitalised, it is taken for a class
    reexported = locate("json:JSONDecoder")
    assert reexported.explicit_backward is None and reexported.is_class
    with pytest.raises(TargetError, match="is not FILE.py:NAME"):
        locate("no_colon_here")


def test_the_source_is_parsed_once_per_implementation(path, monkeypatch):
    parsed = []
    real = ast.parse
    monkeypatch.setattr(ast, "parse", lambda source, *a, **k: (parsed.append(a[:1]), real(source, *a, **k))[1])
    for attr, passes in (("rms_norm", ("forward",)), ("rms_norm_backward", ("backward",))):
        parsed.clear()
        impl = user_implementation(f"{path}:{attr}", "rms_norm", "qwen3")  # the framework detected from it too
        assert impl.passes == passes and impl.framework == "numpy"
        assert parsed == [(path,)]


def test_the_implementation_carries_it_and_its_params_follow_from_it(path):
    impl = user_implementation(f"{path}:rms_norm", "rms_norm", "qwen3", call="f(x, weight, eps)")
    target = impl.target
    assert isinstance(target, UserTarget) and target.framework == "numpy" and not target.forced
    assert target.call == "f(x, weight, eps)" and target.op == "rms_norm"
    # plain values for the factory's keywords, as a repro script passes them
    assert dict(impl.params) == {"target": f"{path}:rms_norm", "framework": "numpy", "op": "rms_norm",
                                 "call": "f(x, weight, eps)", "init": "", "weight_attr": "", "forced": False}
    assert impl.replay == ("--target", f"{path}:rms_norm", "--call", "f(x, weight, eps)")
    with pytest.raises(ValueError, match="are not its target's"):
        Implementation("x", "user", "numpy", impl.entry, impl.op_conventions, params=(("target", "else"),),
                       target=target)


def test_a_worker_receives_the_facts_without_the_tree(path):
    impl = user_implementation(f"{path}:rms_norm_backward", "rms_norm", "qwen3")
    sent = pickle.loads(pickle.dumps(impl))
    assert sent == impl and hash(sent) == hash(impl)
    assert sent.target.tree is None and impl.target.tree is not None
    assert sent.target.explicit_backward is True and sent.params == impl.params


def test_the_worker_reads_the_decision_instead_of_deciding_again(path):
    impl = user_implementation(f"{path}:rms_norm", "rms_norm", "qwen3")
    adapter = make_adapter(pickle.loads(pickle.dumps(impl)))  # as the worker receives it
    out = np.asarray(adapter(CASE.op, CASE.contract, CASE.inputs()))
    assert out.shape == CASE.inputs().arrays["x"].shape
    # the decision is the target's: one that says it is a backward is refused as a forward, whatever it loads
    said = replace(impl, target=replace(impl.target, explicit_backward=True))
    with pytest.raises(TypeError, match="rms_norm takes the upstream gradient first: it is a backward"):
        make_adapter(said)


def test_where_the_source_is_silent_the_loaded_signature_decides(path):
    impl = user_implementation(f"{path}:nested_backward", "rms_norm", "qwen3")
    assert impl.target.explicit_backward is None and impl.passes == ("forward",)  # taken for a forward
    with pytest.raises(TypeError, match="nested_backward takes the upstream gradient first"):
        make_adapter(impl)
    loaded = locate(f"{path}:aliased")
    assert loaded.backward_of(lambda dy, x, weight, eps: None) and not loaded.backward_of(lambda x, w, e: None)
