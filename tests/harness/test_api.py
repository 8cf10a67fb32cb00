"""The Python API's run_model: `normdiff model` for a user's own test suite."""
import pytest

from normdiff.harness import api
from normdiff.harness.data.errors import UsageError

pytest.importorskip("transformers")


def test_run_model_names_the_first_site_of_a_mutant():
    run = api.run_model("qwen3", norm="gamma-plus-one", qk="numpy", tokens=16)
    assert not run.agrees
    assert run.first_diverging.path == "model.layers.0.input_layernorm"
    assert {s.implementation for s in run.sites} == {"gamma-plus-one", "numpy"}


@pytest.mark.parametrize("kwargs, says", [
    ({"norn": "numpy"}, "no kind 'norn'"),
    ({"norm": "numpy", "timeout": 0}, "timeout"),
    ({}, "nothing to swap in"),
    ({"gated": "numpy"}, "qwen3 has no gated sites"),
    ({"quant": "numpy", "quant_convention": "deepseek-v3-fp8"}, "its norm is not qwen3's"),
])
def test_run_model_refuses_bad_arguments_before_any_model_runs(kwargs, says):
    with pytest.raises(UsageError, match=says):
        api.run_model("qwen3", **kwargs)


@pytest.mark.parametrize("kwargs, says", [
    ({"norm": 3}, "norm must be a registered implementation's name or a target 'FILE.py:NAME' (a string or a "
                  "pathlib.Path); got 3 (int)"),
    ({"norm": ""}, "norm is empty: give a registered implementation's name or a target 'FILE.py:NAME'"),
    ({"norm": "numpy", "tokens": "128"}, "tokens must be a whole number from 1 to 256; got '128'"),
    ({"norm": "numpy", "dtype": 3}, "dtype must be a dtype name (a string), e.g. 'fp32'; got 3 (int)"),
    ({"norm": "numpy", "family": 3}, "family must be a family name (a string), e.g. 'olmo'; got 3 (int)"),
], ids=["target-a-number", "target-empty", "tokens-a-string", "dtype-a-number", "family-a-number"])
def test_run_model_names_the_argument_what_it_got_and_what_it_takes(kwargs, says):
    kwargs = {"family": "qwen3", **kwargs}
    with pytest.raises(UsageError) as err:
        api.run_model(kwargs.pop("family"), **kwargs)
    assert says in str(err.value)
