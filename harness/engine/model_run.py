"""normdiff model's engine: run a small HF model in a torch worker with implementations swapped into
its norm sites (implementations/hf_model.py), then judge every site call against its convention's
exact result on the input that site received, with the budget a `normdiff run` case of the same op,
dtype and width gets.

Judging each site on its own input is what names the first wrong site: a site downstream of a wrong
one receives a drifted input, and its own output is still judged on that input, so drift alone
never makes a correct site look wrong. The drift itself is reported beside it: how far the site's
input and output moved from the unswapped run's.
"""
from __future__ import annotations

import contextlib
import shutil
from dataclasses import asdict, dataclass, field

import numpy as np

from normdiff.cases.model import Case, CaseInputs
from normdiff.harness.data.dtypes import format_of, get_format
from normdiff.harness.data.outcomes import OUTCOMES, PASSING
from normdiff.harness.engine import judge, quant_judge, runner
from normdiff.harness.engine.pool import Worker

TASK = "normdiff.implementations.hf_model:run"


class ModelRunError(Exception):
    """The model could not be run at all (the worker's reply says why)."""


@dataclass
class SiteResult:
    """One site of the model (its module path), judged over its calls in the swapped run."""

    path: str
    kind: str
    op: str
    convention: str
    implementation: str  # what computed it in the swapped run ("": the model's own class)
    outcome: str  # the worst over its calls
    max_ulp: float
    budget: float
    # the model's own class at this site in the unswapped run, judged the same way
    reference_outcome: str
    reference_max_ulp: float
    input_drift: float  # relative L2 distance of its input from the unswapped run's
    output_drift: float
    detail: str = ""
    # a quantizing site: the largest relative L2 distance over its calls of the q * scale that went
    # on from the exact y of the call's own input (the quantization error the linear after it sees)
    quant_error: float | None = None

    @property
    def passing(self) -> bool:
        return self.outcome in PASSING


@dataclass
class Comparison:
    """The swapped run's final hidden state or logits against the unswapped run's."""

    max_abs: float
    rel_l2: float
    identical: bool
    top1_agreement: float | None = None  # share of token positions with the same argmax (logits)
    nonfinite: int = 0  # values NaN or Inf where the unswapped run's are finite
    size: int = 0


@dataclass
class OwnSite:
    """A site's own class in the unswapped run (every site, also those after a failed swap)."""

    path: str
    outcome: str
    max_ulp: float
    budget: float


@dataclass
class ModelRun:
    """A judged `normdiff model` run: `sites` (SiteResult, in call order), `first_diverging` (the
    first swapped site out of budget, or None), `failed` (where a swapped implementation raised),
    `hidden` and `logits` (Comparison with the unswapped run), `own` (the model's own classes,
    judged the same way)."""

    family: str
    dtype: str
    seed: int
    tokens: int
    swaps: dict  # kind -> implementation name
    sites: list[SiteResult] = field(default_factory=list)
    first_diverging: SiteResult | None = None
    failed: dict | None = None  # {path, why}: a swapped implementation raised there
    hidden: Comparison | None = None
    logits: Comparison | None = None
    versions: dict = field(default_factory=dict)
    replay: str = ""  # the command line that runs it again (set by the command that ran it)
    own: list[OwnSite] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        """Every swapped site within its budget (the model's own classes are the reference, not on trial)."""
        return self.failed is None and all(s.passing for s in self.sites if s.implementation)

    @property
    def own_out_of_budget(self) -> list["OwnSite"]:
        """Sites where the model's own class left the budget in the unswapped run: a finding about
        the model's code (or the budget), reported beside the verdict, never part of it."""
        return [s for s in self.own if s.outcome not in PASSING]

    def as_dict(self) -> dict:
        out = asdict(self)
        out["first_diverging"] = self.first_diverging.path if self.first_diverging else None
        out["own_out_of_budget"] = [s.path for s in self.own_out_of_budget]
        return out


@contextlib.contextmanager
def torch_worker(timeout: float):
    """A torch worker for model runs, with its own temporary folder; both gone on the way out."""
    tmp = runner.run_tmp_dir()
    worker = Worker("torch", timeout=timeout, tmp_dir=tmp)
    try:
        yield worker
    finally:
        worker.close()
        shutil.rmtree(tmp, ignore_errors=True)


def run(family: str, swaps: dict, dtype: str = "bfloat16", seed: int = 0, tokens: int = 128,
        timeout: float = 600.0, worker: Worker | None = None, conventions: dict | None = None) -> ModelRun:
    """Run and judge. `swaps`: kind -> Implementation; `conventions`: kind -> the convention of a
    kind that has a choice (a quantizing kind's; its default where not given). `worker`: a torch
    worker to reuse (the teaching table runs many models on one import); else one is started and
    ended here."""
    if worker is None:
        with torch_worker(timeout) as own:
            return run(family, swaps, dtype, seed, tokens, timeout, own, conventions)
    reply = worker.call(("task", TASK, {"family": family, "dtype": dtype, "seed": seed, "tokens": tokens,
                                        "swaps": swaps, "conventions": conventions or {}}), timeout=timeout)
    if reply[0] != "ok":
        raise ModelRunError(f"the model did not run ({reply[0]}): {reply[1]}")
    return judge_run(reply[1], {kind: impl.name for kind, impl in swaps.items()})


def judge_run(data: dict, swaps: dict) -> ModelRun:
    result = ModelRun(data["family"], data["dtype"], data["seed"], len(data["tokens"]), swaps,
                      failed=data["failed"], versions={"transformers": data["transformers"], "torch": data["torch"]})
    failed = data["failed"]
    for site in data["sites"]:
        # the model's own class computes the plain norm even where the swapped site quantizes
        own_site = dict(zip(("op", "convention"), site.get("own") or (site["op"], site["convention"])))
        own = _worst([judge_call(own_site, c) for c in site["reference"]])
        result.own.append(OwnSite(site["path"], own.outcome, own.max_ulp, own.tolerance_ulp))
        if failed is not None and not site["swapped"] and site["path"] != failed["path"]:
            continue  # after the site that failed: the swapped run never got here
        result.sites.append(_judge_site(site, swaps.get(site["kind"], ""), own, failed))
    result.first_diverging = next((s for s in result.sites if s.implementation and not s.passing), None)
    if data["swapped"] is not None:
        result.hidden = compare(data["swapped"]["hidden"], data["reference"]["hidden"])
        result.logits = compare(data["swapped"]["logits"], data["reference"]["logits"], top1=True)
    return result


def _judge_site(site: dict, implementation: str, own: judge.Measurement, failed: dict | None = None) -> SiteResult:
    judged = [judge_results(site, c) for c in site["swapped"]]
    swapped = [_worst(list(j.values())) for j in judged]
    if failed is not None and failed["path"] == site["path"]:
        swapped.append(judge.failure("error", f"the swapped implementation {failed['why']}"))
    worst = _worst(swapped)
    x_drift = max((rel_l2(s["arrays"]["x"], r["arrays"]["x"]) for s, r in zip(site["swapped"], site["reference"])),
                  default=float("nan"))
    y_drift = max((rel_l2(_onward(s), _onward(r)) for s, r in zip(site["swapped"], site["reference"])),
                  default=float("nan"))
    quantized = [j["q"].rel_l2 for j in judged if "q" in j]
    return SiteResult(site["path"], site["kind"], site["op"], site["convention"], implementation, worst.outcome,
                      worst.max_ulp, worst.tolerance_ulp, own.outcome, own.max_ulp, x_drift, y_drift,
                      worst.detail, max(quantized, key=_nan_first) if quantized else None)


def _nan_first(value: float) -> float:
    return np.inf if value != value else value


def judge_call(site: dict, call: dict) -> judge.Measurement:
    """One site call judged as a case of the site's op and convention whose inputs are the call's."""
    return _worst(list(judge_results(site, call).values()))


def judge_results(site: dict, call: dict) -> dict[str, judge.Measurement]:
    """Each result of a site call judged (y, a fused add's residual_out, a quantizing op's q and
    scale in the format's units: engine/quant_judge.py)."""
    arrays, heads = call["arrays"], call["num_heads"]
    x = arrays["x"]
    case = Case(site["op"], site["convention"], format_of(x).name, x.shape[0], x.shape[1], heads, eps=call["eps"])
    prepared = runner.prepare(case, inputs=CaseInputs(arrays, heads))
    results = _results(call)
    with np.errstate(all="ignore"):
        return {name: runner.judged_quant(name, results, e.ref) if isinstance(e.ref, quant_judge.QuantReference)
                else judge.judge(results[name], e.ref, get_format(case.dtype), e.budget, heads, case.op,
                                 systematic=e.systematic)
                for name, e in prepared.expected.items()}


def _results(call: dict) -> dict:
    """A call's outputs by result: y, a fused add's residual_out, a quantizing op's q and scale."""
    return call["y"] if isinstance(call["y"], dict) else {"y": call["y"]}


def _onward(call: dict) -> np.ndarray:
    """What the call handed on to the model: y, or a quantizing site's q * scale."""
    return call["onward"] if "onward" in call else _results(call)["y"]


def _worst(measurements: list) -> judge.Measurement:
    rank = {o: i for i, o in enumerate(OUTCOMES)}
    return max(measurements, key=lambda m: (rank.get(m.outcome, 0), np.nan_to_num(m.max_ulp, nan=-1.0)))


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    with np.errstate(all="ignore"):
        norm, diff = _norm(b), _norm(a - b)
        return float(diff / norm) if norm else float(diff)


def _norm(v: np.ndarray) -> float:
    """Sums of squares, not np.linalg.norm: BLAS dot is slow here (judge.py says why), most of a
    model run's judging time while the torch worker's threads still spin."""
    return float(np.sqrt(np.sum(v * v)))


def compare(got: np.ndarray, want: np.ndarray, top1: bool = False) -> Comparison:
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    both = np.isfinite(g) & np.isfinite(w)
    max_abs = float(np.abs(g - w)[both].max()) if both.any() else 0.0
    agreement = float(np.mean(g.argmax(-1) == w.argmax(-1))) if top1 else None
    same = got.shape == want.shape and got.tobytes() == want.tobytes()
    nonfinite = int((~np.isfinite(g) & np.isfinite(w)).sum())
    return Comparison(max_abs, rel_l2(g, w), bool(same), agreement, nonfinite, int(g.size))
