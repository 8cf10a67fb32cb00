"""JAX's module systems called as their frameworks call them (implementations/jax_modules.py), in
process: a flax.linen module through init / apply, an equinox module vmapped over the rows with its
weight set by eqx.tree_at, a haiku module constructed inside hk.transform; each loaded with the
case's weight and bias and compared with the oracle, and a module that cannot be bound refused with
the wrapper to write. Each library is optional: its tests skip where it is not installed. One shape
per op, so JAX compiles little."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from normdiff.cases.model import Case
from normdiff.implementations.user import make_adapter

pytest.importorskip("jax")

RMS = Case.of("rms_norm", "olmo2", "float32", "4x64", weight="trained", eps=1e-5)
LN = Case.of("layer_norm", "torch", "float32", "4x64", weight="trained", bias="trained", eps=1e-5)


def _run(adapter, case):
    return np.asarray(adapter(case.op, case.contract, case.inputs()))


def _expected(case):
    from normdiff.harness.engine import oracle

    inputs = case.inputs()
    return oracle.evaluate(case.contract, inputs.arrays, inputs.num_heads)


def _close(adapter, case):
    got, want = _run(adapter, case), np.asarray(_expected(case), dtype=np.float64)
    # a trained weight and bias: a module that kept its initial ones and zeros is far off
    assert got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-6), np.abs(got - want).max()


@pytest.mark.parametrize("target, case", [("flax.linen:RMSNorm", RMS), ("flax.linen:LayerNorm", LN)])
def test_a_linen_module_is_initialised_then_applied_with_the_case_params(target, case):
    pytest.importorskip("flax.linen")
    init = "Cls(epsilon=eps, use_fast_variance=False)" if case is LN else ""
    _close(make_adapter(target, "jax", case.op, init=init), case)


@pytest.mark.parametrize("target, case", [("equinox.nn:RMSNorm", RMS), ("equinox.nn:LayerNorm", LN)])
def test_an_equinox_module_is_vmapped_over_the_rows(target, case):
    pytest.importorskip("equinox")
    adapter = make_adapter(target, "jax", case.op)
    assert adapter.init.text == "Cls(shape=dim, eps=eps)"  # its `shape` is the span
    _close(adapter, case)


@pytest.mark.parametrize("target, case", [("haiku:RMSNorm", RMS), ("haiku:LayerNorm", LN)])
def test_a_haiku_module_is_built_inside_transform(target, case):
    pytest.importorskip("haiku")
    adapter = make_adapter(target, "jax", case.op)
    assert "axis=-1" in adapter.init.text  # required, with no default: x's last axis
    _close(adapter, case)


def test_a_linen_module_normdiff_cannot_initialise_is_refused_with_the_wrapper_to_write(tmp_path):
    pytest.importorskip("flax.linen")
    path = tmp_path / "two_inputs.py"
    path.write_text(textwrap.dedent("""
        import flax.linen as nn
        import jax.numpy as jnp

        class Norm(nn.Module):
            epsilon: float = 1e-6

            @nn.compact
            def __call__(self, x, mask):  # a second input normdiff does not give
                scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
                return x * scale * mask
        """))
    adapter = make_adapter(f"{path}:Norm", "jax", "rms_norm")
    with pytest.raises(TypeError) as caught:
        _run(adapter, RMS)
    message = str(caught.value)
    assert message.startswith("normdiff cannot run Norm as a linen module: init(key, x) failed (TypeError:")
    assert "module.apply({'params': {'scale': weight}}, x)" in message and "normdiff check FILE.py:norm" in message


def test_a_user_equinox_module_gets_its_weight_through_tree_at(tmp_path):
    pytest.importorskip("equinox")
    path = tmp_path / "eqx_norm.py"
    path.write_text(textwrap.dedent("""
        import equinox as eqx
        import jax
        import jax.numpy as jnp

        class Norm(eqx.Module):
            gamma: jax.Array
            eps: float

            def __init__(self, hidden_size, eps=1e-6):
                self.gamma, self.eps = jnp.ones(hidden_size), eps

            def __call__(self, x):  # one example: (hidden_size,)
                return x * jax.lax.rsqrt(jnp.mean(x * x) + self.eps) * self.gamma
        """))
    adapter = make_adapter(f"{path}:Norm", "jax", "rms_norm")
    assert adapter.init.text == "Cls(hidden_size=dim, eps=eps)"
    _close(adapter, RMS)
