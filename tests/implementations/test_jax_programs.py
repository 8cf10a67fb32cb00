"""Compiled JAX programs on disk (implementations/jax_programs.py): a program stored by one process
runs in another with the same bits; anything unreadable, foreign or failing is compiled afresh; a
different salt or signature never shares a file."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from normdiff.implementations import jax_programs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def f(x, scale):
    # a reduction and a rsqrt: a program whose kernels must come along when it is stored
    return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * scale


ARGS = (np.linspace(-3, 3, 64 * 128, dtype=np.float32).reshape(64, 128), np.float32(1.5))


@pytest.fixture(autouse=True)
def fresh_jax():
    """Each test in the state of a fresh worker, whatever ran before it in this process: JAX decides
    once per process whether its persistent cache is used and keeps what it compiled in memory, so
    a module that ran earlier on the same pytest worker (test_jax_own enables that cache) would hand
    these tests executables served from it."""
    from jax._src import compilation_cache

    jax.clear_caches()
    compilation_cache.reset_cache()
    yield
    jax.clear_caches()
    compilation_cache.reset_cache()


def stored(folder) -> list[Path]:
    return sorted((Path(folder) / "programs").glob("*"))


def test_a_program_stored_by_one_process_runs_in_another_with_the_same_bits(tmp_path):
    script = textwrap.dedent(f"""
        import numpy as np, jax, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_jax_programs import f, ARGS
        from normdiff.implementations import jax_programs
        programs = jax_programs.Programs({str(tmp_path)!r}, "salt")
        out = np.asarray(programs.call(("f",), jax.jit(f), *ARGS))
        sys.stdout.buffer.write(out.tobytes())
    """)
    first = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=ROOT, timeout=120)
    assert first.returncode == 0, first.stderr.decode()
    assert len(stored(tmp_path)) == 1
    again = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=ROOT, timeout=120)
    assert again.returncode == 0, again.stderr.decode()
    assert again.stdout == first.stdout == np.asarray(jax.jit(f)(*ARGS)).tobytes()


STEP = """
import numpy as np, jax, sys
sys.path.insert(0, {tests!r})
from test_jax_programs import f, ARGS
from normdiff.implementations import jax_programs
jax.config.update("jax_compilation_cache_dir", {jax_cache!r})
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
programs = jax_programs.Programs({programs!r}, "salt")
if {step!r} == "jax":
    jax.jit(f)(*ARGS).block_until_ready()  # JAX's persistent cache now holds f
elif {step!r} == "store":
    programs.call(("f",), jax.jit(f), *ARGS)
else:
    programs._compile = lambda *a: sys.exit("compiled although the program was stored")
    sys.stdout.buffer.write(np.asarray(programs.call(("f",), jax.jit(f), *ARGS)).tobytes())
"""


def test_a_program_jaxs_own_cache_holds_is_still_stored_whole(tmp_path):
    # an executable JAX's persistent cache hands back serializes without its CPU kernels and fails
    # to run in another process ("Function ... not found"): programs are compiled with it off
    def step(name):
        script = STEP.format(tests=str(Path(__file__).parent), jax_cache=str(tmp_path / "jax"),
                             programs=str(tmp_path / "ours"), step=name)
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()
        return proc.stdout

    step("jax")
    step("store")
    assert step("load") == np.asarray(jax.jit(f)(*ARGS)).tobytes()


def test_a_stored_program_is_loaded_not_compiled(tmp_path, monkeypatch):
    jax_programs.Programs(str(tmp_path), "salt").call(("f",), jax.jit(f), *ARGS)
    fresh = jax_programs.Programs(str(tmp_path), "salt")
    monkeypatch.setattr(fresh, "_compile", lambda *a: pytest.fail("compiled although the program was stored"))
    assert np.array_equal(fresh.call(("f",), jax.jit(f), *ARGS), jax.jit(f)(*ARGS))


def test_a_corrupt_or_failing_program_is_compiled_afresh_and_replaced(tmp_path, monkeypatch):
    jax_programs.Programs(str(tmp_path), "salt").call(("f",), jax.jit(f), *ARGS)
    (path,) = stored(tmp_path)
    path.write_bytes(b"not a program")
    want = np.asarray(jax.jit(f)(*ARGS))
    assert np.array_equal(jax_programs.Programs(str(tmp_path), "salt").call(("f",), jax.jit(f), *ARGS), want)
    assert path.read_bytes() != b"not a program"  # written again, whole

    def fails_to_run(*args):  # what a program that cannot run here does: it fails when read
        raise RuntimeError("NOT_FOUND: Function add_rsqrt_fusion not found")

    monkeypatch.setattr(jax_programs.serialize_executable, "deserialize_and_load", lambda *a, **k: fails_to_run)
    assert np.array_equal(jax_programs.Programs(str(tmp_path), "salt").call(("f",), jax.jit(f), *ARGS), want)


def test_another_salt_key_or_shape_is_another_program(tmp_path):
    programs = jax_programs.Programs(str(tmp_path), "salt")
    programs.call(("f",), jax.jit(f), *ARGS)
    programs.call(("g",), jax.jit(f), *ARGS)
    programs.call(("f",), jax.jit(f), ARGS[0][:32], ARGS[1])
    jax_programs.Programs(str(tmp_path), "other salt").call(("f",), jax.jit(f), *ARGS)
    assert len(stored(tmp_path)) == 4


def test_without_a_folder_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    programs = jax_programs.Programs(None, "salt")
    assert np.array_equal(programs.call(("f",), jax.jit(f), *ARGS), jax.jit(f)(*ARGS))
    assert list(tmp_path.iterdir()) == []


def test_the_salt_follows_the_sources_and_xla_flags(tmp_path, monkeypatch):
    source = tmp_path / "program.py"
    source.write_text("a")
    first = jax_programs.salt((str(source),))
    source.write_text("b")
    second = jax_programs.salt((str(source),))
    assert second != first and jax_programs.salt((str(source),), ("flax",)) != second
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=false")
    assert jax_programs.salt((str(source),)) != second
