"""JAX (with flax, equinox and haiku on top): jax arrays convert to NumPy with their dtype, bfloat16
included (jax uses ml_dtypes' bfloat16). A module class is called as its own module system calls it:
flax nnx holds its params as attributes (here); flax.linen, equinox and haiku modules go through
the wrappers of implementations/jax_modules.py (init / apply, vmap, hk.transform)."""
from __future__ import annotations

import os

from normdiff.implementations.frameworks.record import Framework

CACHE_ENV = "NORMDIFF_JAX_CACHE"  # empty: no persistent compilation cache (implementations/jax_own.py)


def setup() -> None:
    """JAX's persistent compilation cache on for the code under test, before its first import (JAX
    reads these variables then; a value the user set stays). Eager JAX compiles every primitive for
    every new shape and dtype, ~0.3 s a shape for an 8-op norm, and a check runs every user's code on
    the same shapes: measured here, 18 shapes of haiku's RMSNorm took 5.5 s cold and 1.2 s from the
    cache. The cache holds compiled programs keyed by their HLO, never results, so a program is
    the one JAX would compile; an unwritable cache leaves it off (benchmarks/bench_jax_cache.py)."""
    from normdiff.files import cache_dir

    path = cache_dir(CACHE_ENV, "jax")
    if path is None:
        return
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", path)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


def from_numpy(array):
    import jax.numpy as jnp

    return jnp.asarray(array)


def init_extras(cls) -> dict:
    """flax nnx modules take their random state at construction: a fixed one (the case's weight
    replaces whatever it initialises)."""
    import inspect

    try:  # nnx's metaclass shows (*args, **kwargs): the constructor is __init__
        takes = "rngs" in inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes:
        return {}
    from flax import nnx

    return {"rngs": nnx.Rngs(0)}


def constructor(cls):
    """A haiku class is constructed inside hk.transform (jax_modules.py): a stand-in builds it."""
    from normdiff.implementations import jax_modules

    return jax_modules.constructor(cls)


def prepare_module(module, x):
    """A linen or equinox module wrapped so that it runs as its framework runs it."""
    from normdiff.implementations import jax_modules

    return jax_modules.wrapped(module)


def build(module, x) -> None:
    """A linen or haiku module's params come from init with an input like x."""
    if _bound(module):
        module.build(x)


def _bound(module) -> bool:
    from normdiff.implementations import jax_modules

    return isinstance(module, jax_modules.BOUND)


def _params(module) -> dict:
    from flax import nnx

    return {name: value for name, value in vars(module).items() if isinstance(value, nnx.Param)}


def _value(param):
    return param.get_value() if hasattr(param, "get_value") else param.value  # flax >= 0.12: get_value


def weights(module) -> dict:
    if _bound(module):
        return module.weights()
    try:
        found = _params(module)
    except ImportError:  # plain JAX code without flax: array attributes
        found = {}
    if found:
        return {name: tuple(_value(p).shape) for name, p in found.items()}
    return {name: tuple(v.shape) for name, v in vars(module).items() if hasattr(v, "shape")}


def set_weight(module, name: str, weight) -> None:
    """An nnx.Param takes the value in its own dtype (float32 by default: exact for bf16 / fp16),
    converted on the host (an eager JAX cast is a program compiled for every new shape); a plain
    attribute is replaced. The param may be abstract (a module built under nnx.eval_shape)."""
    import jax.numpy as jnp
    import numpy as np

    if _bound(module):
        module.set_weight(name, weight)
        return
    current = getattr(module, name)
    if hasattr(current, "set_value"):
        current.set_value(jnp.asarray(np.asarray(weight).astype(_value(current).dtype)))
    elif hasattr(current, "value") and hasattr(current.value, "dtype"):
        current.value = jnp.asarray(np.asarray(weight).astype(current.value.dtype))
    else:
        setattr(module, name, jnp.asarray(weight))


def differentiate(forward, arrays: dict, dy, params: dict) -> dict:
    """J^T dy of a user's JAX function by jax.vjp, with respect to its float inputs; dy in the
    output's dtype (cast exactly: refused where the cast would round)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    if params:
        raise TypeError("normdiff differentiates JAX functions, not module classes: give a function, or an explicit "
                        "backward whose first parameter is dy")
    names = list(arrays)
    out, pullback = jax.vjp(lambda *values: forward(dict(zip(names, values))), *(jnp.asarray(arrays[n]) for n in names))

    def cotangent(o, g):
        c = jnp.asarray(g).astype(o.dtype)
        if not np.array_equal(np.asarray(c.astype(jnp.asarray(g).dtype)), np.asarray(g)):
            raise ValueError(f"dy in {g.dtype} is not exactly representable in the output's {o.dtype}")
        return c

    if isinstance(dy, dict):  # several results (a fused add's): one cotangent each, in order
        return dict(zip(names, pullback(tuple(cotangent(o, g) for o, g in zip(out, dy.values())))))
    return dict(zip(names, pullback(cotangent(out, dy))))


FRAMEWORK = Framework("jax", modules=("jax", "jaxlib"), extra="jax", distributions=("jax", "jaxlib"),
                      libraries={"flax": "flax", "equinox": "jax-modules", "haiku": "jax-modules"}, user_code=True,
                      detect=("jax", "flax", "equinox", "haiku", "praxis"), array_types=("jax",),
                      from_numpy=from_numpy, setup=setup, module_types=("flax", "equinox", "haiku"), constructor=constructor,
                      init_extras=init_extras, prepare_module=prepare_module, build=build, weights=weights,
                      set_weight=set_weight, differentiate=differentiate, differentiates_modules=False)
