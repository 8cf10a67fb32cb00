"""The built-in implementations, as registry entries (descriptions only: nothing is imported)."""
from __future__ import annotations

from normdiff.harness.contracts import pairs
from normdiff.harness.registry import Implementation


def builtin() -> list[Implementation]:
    every_pair = frozenset(pairs())
    return [
        Implementation("numpy", "own", "numpy", "normdiff.implementations.numpy_own:run", every_pair,
                       "own NumPy: float32 statistics, the convention's cast points, bf16 via ml_dtypes",
                       batch_rows=True),
        Implementation("torch", "own", "torch", "normdiff.implementations.torch_own:run", every_pair,
                       "own PyTorch modules in the style of the seed's qwen/norm.py",
                       batch_rows=True),
        Implementation("jax", "own", "jax", "normdiff.implementations.jax_own:run", every_pair,
                       "own JAX (jax.numpy, jitted once per op and cast, eps traced)",
                       batch_rows=True),
    ]
