"""Compiled JAX programs kept on disk under our own key, so that a later run loads each one instead
of tracing, lowering and looking it up in JAX's persistent compilation cache.

Why: JAX's persistent cache saves XLA's compilation, but every run still traces each program and
lowers it to MLIR to compute the cache's key: ~25 ms a program here, against ~6 ms to load the
executable itself (measured on the default run's own-JAX programs, bit-identical outputs). With
~60 own-JAX programs per run that was ~1.2 s of a worker's time on every repeat run.

The key is what fixes the program: the caller's key (its static knobs), the arguments' tree,
shapes and dtypes, and a salt of everything else that could change the compiled code (JAX's and
jaxlib's versions, XLA_FLAGS, this machine's CPU features, and the source of the modules that
define the programs). An entry that cannot be written, read or run is ignored (compiled afresh),
never trusted: loading a program is an optimisation, not a way to get a different one.

Uses JAX's own serialization (jax.experimental.serialize_executable, with the executable
serialized as the persistent cache serializes it, `LoadedExecutable.serialize()`: the
`client.serialize_executable` the experimental pickler uses leaves out the CPU kernels, and the
program then fails to run in another process), of programs compiled with JAX's persistent cache
off (`_fresh`). Only ever imported inside the JAX worker.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
from importlib import metadata
from pathlib import Path

import jax
from jax.experimental import serialize_executable
from jax._src.lib import xla_client

from normdiff.files import atomic_write


class _Pickler(serialize_executable._JaxPjrtPickler):
    def persistent_id(self, obj):
        if isinstance(obj, xla_client.LoadedExecutable):
            return ("exec", obj.serialize())  # with its kernels, as JAX's persistent cache stores it
        return super().persistent_id(obj)


def salt(sources: tuple[str, ...], distributions: tuple[str, ...] = ()) -> str:
    """What else a compiled program depends on: JAX's and jaxlib's versions (and those of
    `distributions`, the libraries the programs call), XLA_FLAGS, the CPU (XLA compiles for the
    host's instruction set) and the source files that define the programs."""
    digest = hashlib.sha256()
    versions = [_version(d) for d in ("jax", "jaxlib", *distributions)]
    for part in (*versions, os.environ.get("XLA_FLAGS", ""), _cpu_flags()):
        digest.update(part.encode() + b"\0")
    for source in (__file__, *sources):  # this module's too: how programs are compiled and stored
        digest.update(Path(source).read_bytes() + b"\0")
    return digest.hexdigest()


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return ""


def _cpu_flags() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next((line for line in fh if line.startswith("flags")), "")
    except OSError:
        return ""


class Programs:
    """Compiled programs by key: in memory, and in FOLDER/programs/ when a folder is given."""

    def __init__(self, folder: str | None, salt: str):
        self.folder = Path(folder) / "programs" if folder else None
        self.salt = salt
        self.loaded: dict[str, object] = {}

    def call(self, key: tuple, fn, *args):
        """fn(*args) (fn: a jax.jit function, `key`: what fixes its traced program besides the
        arguments' tree, shapes and dtypes) through that program: one kept from an earlier call,
        one stored by an earlier run, or one compiled now (and stored)."""
        name = self._name(key, args)
        program = self.loaded.get(name)
        if program is not None:
            return program(*args)
        stored = self._load(name)
        if stored is not None:
            try:  # blocking: a program that cannot run here fails when its result is read
                out = jax.block_until_ready(stored(*args))
                self.loaded[name] = stored
                return out
            except Exception:  # a stored program that does not run here: compiled afresh
                self._forget(name)
        program = self.loaded[name] = self._compile(name, fn, args)
        return program(*args)

    def _name(self, key: tuple, args: tuple) -> str:
        leaves, tree = jax.tree_util.tree_flatten(args)
        shapes = [(getattr(a, "shape", ()), str(getattr(a, "dtype", type(a).__name__))) for a in leaves]
        return hashlib.sha256(f"{self.salt}{key!r}{tree}{shapes}".encode()).hexdigest()

    def _load(self, name: str):
        if self.folder is None or not (self.folder / name).exists():
            return None
        try:
            serialized, in_tree, out_tree = pickle.loads((self.folder / name).read_bytes())
            return serialize_executable.deserialize_and_load(serialized, in_tree, out_tree)
        except Exception:  # unreadable, or written by a JAX that cannot be read here
            self._forget(name)
            return None

    def _compile(self, name: str, fn, args):
        with _fresh():
            program = fn.lower(*args).compile()
        if self.folder is not None:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                atomic_write(self.folder / name, pickle.dumps(_serialized(program)), durable=False)
            except Exception:  # an unwritable folder, or a program JAX cannot serialize: not stored
                pass
        return program

    def _forget(self, name: str) -> None:
        try:
            (self.folder / name).unlink()
        except OSError:
            pass


def _fresh():
    """JAX's persistent cache off while a program is compiled here: an executable it hands back
    serializes without its CPU kernels, and then fails to run when loaded in another process
    (measured: "Function add_rsqrt_fusion not found"). Compiled afresh, it is stored whole, and
    later runs load it from here."""
    try:
        from jax._src import config as jax_config

        return jax_config.enable_compilation_cache(False)
    except (ImportError, AttributeError):  # a JAX without the switch: a stored program that
        return contextlib.nullcontext()     # fails is compiled again (Programs.call)


def _serialized(program) -> tuple:
    """serialize_executable.serialize's triple, the executable serialized as the persistent cache
    serializes it (_Pickler)."""
    args_info, in_tree = jax.tree_util.tree_flatten(program.args_info)
    with io.BytesIO() as fh:
        _Pickler(fh).dump((program._executable._unloaded_executable, args_info, program._no_kwargs))
        return fh.getvalue(), in_tree, program.out_tree
