"""The corpus of real implementations (corpus/README.md): every entry is well formed, and each one
runs through `normdiff check` and gets what a user should get, its expected verdict and, for a
catalogued bug, that bug named first; or, where the entry's `open` says normdiff gets it wrong today,
it still does (strict: an entry that normdiff now gets right fails until its `open` is cleared)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("corpus_bench", ROOT / "benchmarks" / "corpus.py")
corpus = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = corpus  # its dataclasses look their module up there
_spec.loader.exec_module(corpus)
ENTRIES = corpus.entries()


def test_every_entry_is_well_formed_and_each_fix_names_its_bug():
    ids = {e.id for e in ENTRIES}
    for e in ENTRIES:
        assert e.kind in corpus.KINDS and e.meta["source"].startswith("https://")
        assert e.expected_verdict in ("agrees", "disagrees"), e.id
        if e.kind == "fixed":
            assert e.meta.get("fix_of") in ids, f"{e.id}: fix_of names no entry"
        if e.kind == "bug":
            assert e.expected_verdict == "disagrees" and (e.expected_bug or e.expect.get("says")), e.id


def _gets_what_a_user_should(entry):
    missing = [m for m in entry.meta.get("requires", []) if importlib.util.find_spec(m) is None]
    if missing:  # an optional library (pip install 'normdiff[jax-modules]')
        pytest.skip(f"{', '.join(missing)} not installed")
    row = corpus.run(entry)
    as_expected = row["right"] and (not entry.expected_bug or row["named_first"])
    got = f"{row['verdict']}, first diagnosis {row['first'] or 'none'} ({row['message'][:200]})"
    if entry.open:
        assert not as_expected, f"{entry.id}: normdiff now gets this right ({got}): clear its `open`"
    else:
        assert as_expected, f"{entry.id}: expected {entry.expected_verdict} {entry.expected_bug}, got {got}"


# Each entry is a `normdiff check` of its own (seconds to tens of seconds): the entries are dealt to
# SHARDS classes, which `make test`'s xdist --dist loadscope sends to different workers (one module
# would keep them all on one)
SHARDS = 8


def _shard(k: int) -> list:
    return [pytest.param(e, id=e.id) for i, e in enumerate(ENTRIES) if i % SHARDS == k]


def _shard_class(k: int) -> type:
    """A test class of the k-th shard of the entries (named TestEntries<k>, collected as such)."""
    @pytest.mark.slow
    class Shard:
        @pytest.mark.parametrize("entry", _shard(k))
        def test_each_entry_gets_what_a_user_should(self, entry):
            _gets_what_a_user_should(entry)

    Shard.__name__ = Shard.__qualname__ = f"TestEntries{k}"
    return Shard


for _k in range(SHARDS):
    globals()[f"TestEntries{_k}"] = _shard_class(_k)
