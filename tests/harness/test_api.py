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
])
def test_run_model_refuses_bad_arguments_before_any_model_runs(kwargs, says):
    with pytest.raises(UsageError, match=says):
        api.run_model("qwen3", **kwargs)
