"""The registry of implementations: what each one is, which (op, convention) pairs it implements,
which framework runs it, and how to load it inside a worker.

An entry is only a description: registering imports nothing. The worker for `framework` imports
`entry` ("package.module:attribute") the first time one of its cases runs, so `normdiff` never pays
for a framework it does not use. The loaded attribute is an *adapter*:

    adapter(op: str, contract: Contract, inputs: CaseInputs) -> array-like shaped like inputs x

or, for an entry with `params`, a factory that returns such an adapter.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

KINDS = ("reference", "own", "framework", "model", "mutant", "user")
FRAMEWORKS = ("numpy", "torch", "jax")
# the modules each framework's worker needs before it can run anything
FRAMEWORK_MODULES = {"numpy": ("numpy",), "torch": ("torch",), "jax": ("jax", "jaxlib")}


@dataclass(frozen=True)
class Implementation:
    name: str
    kind: str
    framework: str
    entry: str
    pairs: frozenset  # of (op, convention)
    description: str = ""
    requires: tuple[str, ...] = ()  # extra importable modules (e.g. "transformers")
    # Rows are independent, so the runner may concatenate the rows of same-shaped cases into one
    # call. Only for code whose results cannot depend on other rows (ours); never for user code.
    batch_rows: bool = False
    # Which worker process runs it (default: one per framework). A separate worker overlaps a slow
    # import with other work but pays for its framework again (measured: transformers in its own
    # worker was slower on two cores, so it shares torch's).
    worker: str = ""
    # When set, `entry` is a factory: the worker calls entry(**dict(params)) once to get the adapter
    # (user code and external commands carry their target this way). Pairs of (name, value).
    params: tuple = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"implementation {self.name!r}: kind {self.kind!r} is not one of {KINDS}")
        if self.framework not in FRAMEWORKS:
            raise ValueError(f"implementation {self.name!r}: framework {self.framework!r} is not "
                             f"one of {FRAMEWORKS}")
        object.__setattr__(self, "pairs", frozenset(self.pairs))
        object.__setattr__(self, "worker", self.worker or self.framework)

    def supports(self, op: str, convention: str) -> bool:
        return (op, convention) in self.pairs

    def unavailable_reason(self) -> str | None:
        """Why this implementation cannot run here, or None. Looks modules up without importing."""
        for module in FRAMEWORK_MODULES[self.framework] + self.requires:
            if importlib.util.find_spec(module) is None:
                extra = {"torch": "torch", "jax": "jax", "jaxlib": "jax",
                         "transformers": "hf", "flax": "flax"}.get(module, "all")
                return (f"{module} is not installed; install it with "
                        f"`pip install 'normdiff[{extra}]'`")
        return None


_REGISTRY: dict[str, Implementation] = {}


def register(impl: Implementation, replace: bool = False) -> Implementation:
    if impl.name in _REGISTRY and not replace:
        raise ValueError(f"implementation {impl.name!r} is already registered")
    _REGISTRY[impl.name] = impl
    return impl


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def implementations() -> list[Implementation]:
    _load_builtins()
    return list(_REGISTRY.values())


def get(name: str) -> Implementation:
    _load_builtins()
    if name not in _REGISTRY:
        raise ValueError(f"unknown implementation {name!r}; known: {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


_builtins_loaded = False


def _load_builtins() -> None:
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        from normdiff.implementations import catalog

        for impl in catalog.builtin():
            _REGISTRY.setdefault(impl.name, impl)
