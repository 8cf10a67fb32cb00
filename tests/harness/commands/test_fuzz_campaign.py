"""`normdiff fuzz --dask`: one search per implementation x op@convention, each with a seed of its
own; the campaign on a Dask LocalCluster finds what the same campaign finds here; a shard that
cannot search is reported and exits 3; usage errors exit 2 before a cluster starts; every found
shard's search replays alone."""
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from normdiff.harness.commands import cli, fuzz_campaign
from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.ops import OPS
from normdiff.implementations import registry

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SEARCH = dict(passes="forward", op="rms_norm", convention="qwen3", max_examples=25, database=False)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMDIFF_HYPOTHESIS_CACHE", str(tmp_path / "cache"))
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)


def test_a_shard_per_implementation_and_op_convention_with_stable_distinct_seeds():
    numpy = registry.get("numpy")
    shards = fuzz_campaign.plan([numpy, registry.get("gamma-plus-one")], 7)
    pairs = {(s.op, s.convention) for s in shards if s.impl.name == "numpy"}
    # every pair fuzz draws (the quantizing ops' too, forward)
    assert len(pairs) == len(numpy.op_conventions) > 20
    assert [s.impl.name for s in shards if s.impl.name != "numpy"] == ["gamma-plus-one"]
    assert len({s.seed for s in shards}) == len(shards)  # every shard its own search
    assert [s.seed for s in fuzz_campaign.plan([numpy], 7)] == [s.seed for s in shards if s.impl.name == "numpy"]
    assert {s.op for s in fuzz_campaign.plan([numpy], 7, op="layer_norm")} == {"layer_norm"}
    with pytest.raises(UsageError, match="implement"):
        fuzz_campaign.plan([numpy], 7, op="layer_norm", convention="qwen3")
    with pytest.raises(UsageError, match="no ULP budget"):
        fuzz_campaign.plan([numpy], 7, dtypes=["float64"])


def _findings(result):
    return [(s.impl.name, s.op, s.convention, r.found, r.minimal and r.minimal["case_id"])
            for s, r in zip(result.shards, result.results)]


def test_the_campaign_on_a_local_cluster_finds_what_it_finds_here():
    pytest.importorskip("distributed")
    impls = [registry.get("gamma-plus-one"), registry.get("numpy"), registry.get("eps-outside-sqrt")]
    here = fuzz_campaign.campaign(impls, None, seed=3, **SEARCH)
    found = [f for f in _findings(here) if f[3]]
    assert {f[0] for f in found} == {"gamma-plus-one", "eps-outside-sqrt"} and here.exit_code == 1
    assert not here.not_run
    cluster = fuzz_campaign.campaign(impls, "local", seed=3, **SEARCH)
    assert _findings(cluster) == _findings(here)
    assert json.loads(json.dumps(cluster.as_dict()))["found"] == 2


def test_a_shard_that_cannot_search_is_reported_and_the_campaign_exits_3(capsys):
    code = cli.main(["fuzz", "--with", f"{FIXTURES / 'user' / 'imports_missing.py'}:rms_norm", "--op", "rms_norm",
                     "--convention", "qwen3", "-i", "numpy", "--pass", "forward", "--max-examples", "5",
                     "--seed", "0", "--no-database", "--dask", "local", "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out
    got = json.loads(out[0])
    assert code == 3 and got["exit_code"] == 3 and got["found"] == 0 and got["not_run"] >= 1
    missing = [r for r in got["results"] if r["found"] is None]
    assert missing and all("cannot be loaded" in r["not_run"] or "no implementation" in r["not_run"]
                           for r in missing), missing


def test_a_found_shard_prints_its_search_which_replays_alone(capsys):
    code = cli.main(["fuzz", "-i", "gamma-plus-one", "--op", "rms_norm", "--convention", "qwen3",
                     "--max-examples", "25", "--seed", "5", "--no-database", "--dask", "local"])
    out = capsys.readouterr().out
    assert code == 1 and "FOUND    gamma-plus-one rms_norm@qwen3" in out and "1 of 1 shard found a failure" in out
    minimal = out.split("minimal case", 1)[1].split()[0]
    search = out.split("search again", 1)[1].strip().splitlines()[0]
    words = shlex.split(search)
    assert words[:2] == ["normdiff", "fuzz"] and "--seed" in words and "--max-examples" in words
    proc = subprocess.run([sys.executable, "-m", "normdiff.harness.commands.cli", *words[1:], "--json"],
                          capture_output=True, text=True, timeout=300)
    again = json.loads(proc.stdout)
    assert proc.returncode == 1 and again["minimal"]["case_id"] == minimal


@pytest.mark.parametrize("args, says", [
    (["-i", "numpy", "--op", "layer_norm", "--convention", "qwen3"], "implement(s) no layer_norm@qwen3"),
    (["-i", "numpy", "--dtype", "float64"], "no ULP budget"),
    (["-i", "numpy", "--dask", ""], "the Dask address must be"),
])
def test_usage_errors_exit_2_before_a_cluster_starts(capsys, args, says):
    argv = ["fuzz", *args] + ([] if "--dask" in args else ["--dask", "local"])
    assert cli.main(argv) == 2
    assert says in capsys.readouterr().err
