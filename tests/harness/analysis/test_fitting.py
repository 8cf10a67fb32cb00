"""The fits on outputs made to order (our NumPy implementation with a knob turned)."""
import numpy as np

from normdiff.cases.model import Case
from normdiff.harness.analysis import fitting


def _fits(outputs, op, convention, changes, **kw):
    outs = outputs(op, convention, changes, **kw)
    triples = [(c, c.inputs(), outs[c.id]) for c in (Case.from_id(cid) for cid in sorted(outs))]
    return {f.kind: f for f in fitting.fit(triples)}


def test_a_layer_norm_eps_is_fitted_through_its_mean_and_bias(outputs):
    # keras-hub's encoder LayerNorms at Keras' 1e-3 default (corpus keras-hub-encoder-layernorm-default-eps)
    fit = _fits(outputs, "layer_norm", "torch", {"eps": 1e-3}, eps=("config", 1e-6), dtypes=("float32",))["eps"]
    assert fit.relation == "constant" and np.isclose(fit.value, 1e-3) and "LayerNormalization" in fit.says


def test_a_right_layer_norm_has_no_eps_fit(outputs):
    assert "eps" not in _fits(outputs, "layer_norm", "torch", {}, eps=("config", 1e-6), dtypes=("float32",))
