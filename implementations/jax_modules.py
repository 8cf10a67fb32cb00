"""JAX's module systems, called the way their own frameworks call them, behind one small interface
(`weights()`, `set_weight(name, weight)`, `build(x)`, `__call__(*args)`) that the jax framework
record (frameworks/jax.py) hands to ClassAdapter like any other module:

  * flax.linen: a linen module is a frozen description; its parameters live outside it, in the
    variables dict `module.init(key, x)` returns, and it runs as `module.apply(variables, x)`. The
    case's weight replaces the entry of variables["params"] (`scale`, `bias`, as linen names them).
  * equinox: an eqx.Module is an immutable pytree holding its arrays, and takes ONE example (an
    eqx.nn norm refuses anything but its declared shape), so a batch goes through `jax.vmap`, as
    equinox's users write it; the weight is replaced with `eqx.tree_at`, which returns a new module.
  * haiku: an hk.Module can only be constructed inside `hk.transform`; the forward is transformed
    once per build, `init(key, x)` gives the params ({module path: {name: array}}), the case's
    weight replaces the entry (`scale`, `offset`), and `apply(params, state, None, x)` runs it.

flax nnx needs none of this: its modules hold their params as attributes (frameworks/jax.py).
Nothing here imports a library at module import: each wrapper imports its own when built.
"""
from __future__ import annotations

import inspect

import numpy as np

# what a module's parameters are initialised from: fixed, since the case's weight replaces them
SEED = 0


def system(cls) -> str | None:
    """Which module system a class belongs to ("linen", "equinox", "haiku"), from the modules of its
    bases (nothing is imported); None for anything else (flax nnx, plain classes)."""
    bases = [b.__module__ or "" for b in inspect.getmro(cls)] if inspect.isclass(cls) else []
    for prefix, name in (("flax.linen", "linen"), ("equinox", "equinox"), ("haiku", "haiku")):
        if any(m == prefix or m.startswith(prefix + ".") for m in bases):
            return name
    return None


def _host(weight, like):
    """The case's weight as a JAX array in the dtype of the parameter it replaces (float32 params
    hold bf16 / fp16 weights exactly), converted on the host: an eager JAX cast compiles a program
    for every new shape."""
    import jax.numpy as jnp

    return jnp.asarray(np.asarray(weight).astype(np.dtype(like.dtype)))


def _flat(tree: dict, prefix: str = "", sep: str = ".") -> dict:
    """{dotted path: array} of a nested dict of arrays."""
    found = {}
    for key, value in tree.items():
        path = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, dict) or hasattr(value, "items"):
            found.update(_flat(dict(value.items()), path, sep))
        elif hasattr(value, "shape"):
            found[path] = value
    return found


def _replaced(tree: dict, path: list[str], value) -> dict:
    """A copy of a nested dict with the leaf at `path` replaced (linen's and haiku's params are
    plain dicts, possibly frozen: copied, never mutated)."""
    head, *rest = path
    copy = dict(tree.items())
    copy[head] = _replaced(copy[head], rest, value) if rest else value
    return copy


class LinenModule:
    """A flax.linen module with its variables: init(key, x) once, apply(variables, ...) per call."""

    def __init__(self, module):
        self.module, self.variables = module, None

    def build(self, x) -> None:
        import jax
        import jax.numpy as jnp

        try:
            self.variables = dict(self.module.init(jax.random.PRNGKey(SEED), jnp.asarray(x)).items())
        except Exception as exc:  # noqa: BLE001 - whatever linen raises: said with the wrapper to write
            raise refused("linen", type(self.module), "init(key, x)", exc) from None

    def weights(self) -> dict:
        return {name: tuple(v.shape) for name, v in _flat(self.variables.get("params", {})).items()}

    def set_weight(self, name: str, weight) -> None:
        current = _flat(self.variables["params"])[name]
        self.variables["params"] = _replaced(self.variables["params"], name.split("."), _host(weight, current))

    def __call__(self, *args, **kwargs):
        try:
            return self.module.apply(self.variables, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - whatever linen raises: said with the wrapper to write
            raise refused("linen", type(self.module), "apply(variables, x)", exc) from None


class EquinoxModule:
    """An eqx.Module called on one example at a time: jax.vmap over every leading dimension of x
    (and of the other array arguments of x's shape: a gate, a residual)."""

    def __init__(self, module):
        self.module = module

    def build(self, x) -> None:  # an equinox module holds its arrays from construction
        return None

    def weights(self) -> dict:
        return {name: tuple(v.shape) for name, v in self._arrays(self.module).items()}

    @staticmethod
    def _arrays(module, prefix: str = "") -> dict:
        """{dotted field path: array} of the module's array fields, nested modules included."""
        import equinox as eqx

        found = {}
        for name, value in vars(module).items():
            path = f"{prefix}.{name}" if prefix else name
            if isinstance(value, eqx.Module):
                found.update(EquinoxModule._arrays(value, path))
            elif hasattr(value, "shape") and hasattr(value, "dtype"):
                found[path] = value
        return found

    def set_weight(self, name: str, weight) -> None:
        import equinox as eqx

        def where(module):
            for part in name.split("."):
                module = getattr(module, part)
            return module
        self.module = eqx.tree_at(where, self.module, _host(weight, where(self.module)))

    def __call__(self, *args, **kwargs):
        import jax

        x = args[0] if args else next(iter(kwargs.values()))
        lead, width = x.shape[:-1], x.shape[-1]

        def rows(value):  # an argument shaped like x is split into examples; anything else is shared
            return value.reshape(-1, width) if getattr(value, "shape", None) == x.shape else value

        def axis(value):
            return 0 if getattr(value, "shape", None) == x.shape else None
        flat_args, flat_kwargs = [rows(a) for a in args], {k: rows(v) for k, v in kwargs.items()}
        in_axes = ([axis(a) for a in args], {k: axis(v) for k, v in kwargs.items()})
        try:
            out = jax.vmap(lambda a, k: self.module(*a, **k), in_axes=in_axes)(flat_args, flat_kwargs)
        except Exception as exc:  # noqa: BLE001 - whatever equinox raises: said with the wrapper to write
            raise refused("equinox", type(self.module), "jax.vmap(module) over the rows", exc) from None
        return jax.tree_util.tree_map(lambda o: o.reshape(*lead, *o.shape[1:]), out)


class HaikuModule:
    """An hk.Module class and its constructor's arguments: constructed inside hk.transform (the only
    place haiku allows), initialised once with x, applied with the case's weight in its params."""

    def __init__(self, cls, args: tuple, kwargs: dict):
        try:  # a wrong argument is said now, as a constructor would, not inside the transform
            inspect.signature(cls).bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{cls.__name__}({_shown(args, kwargs)}): {exc}") from None
        self.cls, self.args, self.kwargs = cls, args, kwargs
        self.transformed, self.params, self.state = None, None, None

    def build(self, x) -> None:
        import haiku as hk
        import jax
        import jax.numpy as jnp

        def forward(*args, **kwargs):
            return self.cls(*self.args, **self.kwargs)(*args, **kwargs)
        self.transformed = hk.transform_with_state(forward)  # with state: a module that keeps some runs too
        try:
            self.params, self.state = self.transformed.init(jax.random.PRNGKey(SEED), jnp.asarray(x))
        except Exception as exc:  # noqa: BLE001 - whatever haiku raises: said with the wrapper to write
            raise refused("haiku", self.cls, "hk.transform(...).init(key, x)", exc) from None

    def weights(self) -> dict:
        return {name: tuple(v.shape) for name, v in self._named().items()}

    def _named(self) -> dict:
        """{module path/param name: array}: haiku's own module paths hold dots and slashes
        ("mlp/~/linear_0"), so the param's name is what follows the last '/'."""
        return {f"{module}/{param}": value for module, params in self.params.items()
                for param, value in params.items()}

    def set_weight(self, name: str, weight) -> None:
        module, _, param = name.rpartition("/")
        current = self.params[module][param]
        self.params = {**self.params, module: {**self.params[module], param: _host(weight, current)}}

    def __call__(self, *args, **kwargs):
        try:
            out, _ = self.transformed.apply(self.params, self.state, None, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - whatever haiku raises: said with the wrapper to write
            raise refused("haiku", self.cls, "apply(params, state, None, x)", exc) from None
        return out


# The function to write where normdiff cannot bind a module (its init needs more than x, its call
# fails on a batch of rows): each system's own way to run a module with given params, wrapped in a
# function that normdiff calls as the op's call (rms_norm(x, weight, eps); add bias, gate, ... as
# the op has them).
WRAPPERS = {
    "linen": ("def norm(x, weight, eps):\n"
              "    module = {cls}(epsilon=eps)\n"
              "    return module.apply({{'params': {{'scale': weight}}}}, x)"),
    "equinox": ("def norm(x, weight, eps):\n"
                "    module = eqx.tree_at(lambda m: m.weight, {cls}(x.shape[-1], eps=eps), weight)\n"
                "    return jax.vmap(module)(x.reshape(-1, x.shape[-1])).reshape(x.shape)"),
    "haiku": ("def norm(x, weight, eps):\n"
              "    f = hk.transform(lambda x: {cls}(axis=-1, eps=eps)(x))\n"
              "    params = f.init(jax.random.PRNGKey(0), x)\n"
              "    params = jax.tree_util.tree_map(lambda p: weight.astype(p.dtype), params)\n"
              "    return f.apply(params, None, x)"),
}


def refused(kind: str, cls, doing: str, exc: Exception) -> TypeError:
    """The error that says what normdiff did, what the module said, and the wrapper to write instead."""
    said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    wrapper = WRAPPERS[kind].format(cls=cls.__name__)
    return TypeError(f"normdiff cannot run {cls.__name__} as a {kind} module: {doing} failed "
                     f"({type(exc).__name__}: {said}). Write the call yourself in a function, e.g.\n\n"
                     f"{wrapper}\n\nand check that function (normdiff check FILE.py:norm ...), with the op's other "
                     "inputs as parameters where it has them (bias, gate, ...)")


def _shown(args: tuple, kwargs: dict) -> str:
    return ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])


def constructor(cls):
    """What builds a module of `cls`: a haiku class's stand-in (constructed later, inside
    hk.transform), any other class itself."""
    if system(cls) == "haiku":
        def make(*args, **kwargs):
            return HaikuModule(cls, args, kwargs)
        return make
    return cls


def wrapped(module):
    """A constructed module ready for the interface above: a linen or equinox module wrapped, a
    haiku stand-in (already one) or anything else as it is."""
    kind = system(type(module))
    if kind == "linen":
        return LinenModule(module)
    if kind == "equinox":
        return EquinoxModule(module)
    return module


BOUND = (LinenModule, EquinoxModule, HaikuModule)
