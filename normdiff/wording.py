"""How normdiff says an error against its budget. Every sentence that compares the two is built
here, so that the judge's details, check, fuzz, model, repro, the baseline comparison, junit.xml,
report.html and summary.md (reports/messages.py) say the same thing in the same words and digits.

It also builds the lines that give check's answer first (the bug it diagnosed, the one-line
summary a failing pytest check shows), so that the CLI and the pytest fixture say them alike.

Errors and budgets are in ULPs (harness/data/budgets.py says where budgets come from); numbers are
written by normdiff.text's named formats. A caller passes plain values and adds what the sentence is
about (a case id, a site's path); tests/test_wording.py fails when a module other than this one
composes such a sentence itself.

Pure, at the base layer so that every layer may use it: imports nothing from normdiff but
normdiff.text.
"""
from __future__ import annotations

from normdiff.text import fixed, general, number, precise, share, ulps


# ---- an error beside its budget ----------------------------------------------------------------


def with_budget(error, budget) -> str:
    """'121 ulp (budget 2)': a row's error and the budget it was judged against ('n/a' for a row
    without one). reports/messages.py's figures: 'max 121 ulp (budget 2)'."""
    return f"{ulps(error)} (budget {number(budget, missing='n/a')})"


def against(error, budget) -> str:
    """'43.6 ulp against 5.44' (normdiff model: a site's error and its budget)."""
    return f"{ulps(error)} against {number(budget)}"


def against_a_budget(error, budget) -> str:
    """'43.6 ulp against a budget of 5.44' (check's margin, fuzz's minimal case)."""
    return f"{ulps(error)} against a budget of {number(budget)}"


def max_ulp_with_budget(error, budget) -> str:
    """'max_ulp 121.375 (budget 2 ulp)': in full, as a replay lists its figures ('-' for none)."""
    return f"max_ulp {precise(error)} (budget {precise(budget)} ulp)"


def budget_of(budget, dtype: str) -> str:
    """'budget 2 ulp of bfloat16': the budget a replayed case is judged against."""
    return f"budget {precise(budget)} ulp of {dtype}"


def channel_bias(mean, rows: int, budget, error) -> str:
    """The judge's detail for a channel whose mean signed error leaves the channel-bias budget
    while every element is within its own budget (engine/judge.py), two decimals each."""
    return (f"coherent per-channel scale error: a channel's mean error is {fixed(mean, 2)} ulp over {rows} rows "
            f"(budget {fixed(budget, 2)}), while every element is within {fixed(error, 2)} ulp")


OFF_CHAIN = "another rounding chain"  # how off_chain's detail begins (check.py finds such rows by it)


def off_chain(fraction, identical, error, budget) -> str:
    """The judge's detail for an output within its ULP budget that rounds where the contract's chain
    does not (engine/chain.py)."""
    return (f"{OFF_CHAIN}: {share(fraction)} of the elements are values no legal float32 order of the "
            f"contract's roundings gives ({share(identical)} bit-identical to its chain), while every element is "
            f"within {fixed(error, 2)} ulp (budget {fixed(budget, 2)})")


# ---- how many are within or outside ------------------------------------------------------------


def outside_the_budget(what: str) -> str:
    """'3 of 40 case(s) of rms_norm@qwen3 outside the budget' for `what` = '3 of 40 case(s) of
    rms_norm@qwen3' (junit.xml's failure message, report.html's failing rows)."""
    return f"{what} outside the budget"


def within_budget(count: int, of: int, what: str) -> str:
    """'35 of 36 swapped sites within budget'."""
    return f"{count} of {of} {what} within budget"


def all_within_budget(count: int, what: str, error, budget, where: str) -> str:
    """'all 36 sites within budget (worst 1.2 ulp against 2, model.layers.0.input_layernorm)'."""
    return f"all {count} {what} within budget (worst {against(error, budget)}, {where})"


def leaves_its_budget(who: str, where: str) -> str:
    """"the model's own class leaves its budget in the unswapped run at ..."."""
    return f"{who} leaves its budget {where}"


def first_out_of_budget(where: str, what: str) -> str:
    """'first site out of budget: PATH (WHAT)': where a model's run first leaves its budget."""
    return f"first site out of budget: {where} ({what})"


# ---- how an error changed against its budget (baseline comparison) ----------------------------


def still_within_budget(change: str) -> str:
    """'identical -> agree (max_ulp 0 -> 1.2), within budget' for `change` the text before."""
    return f"{change}, within budget"


def grew_past_tolerance(change: str, grew, tolerance) -> str:
    """'max_ulp 1 -> 9: grew by 8, more than the tolerance 2 ulp'."""
    return f"{change}: grew by {number(grew)}, more than the tolerance {general(tolerance)} ulp"


def shrank_past_tolerance(change: str, shrank, tolerance) -> str:
    """'max_ulp 9 -> 1: shrank by 8, more than the tolerance 2 ulp'."""
    return f"{change}: shrank by {number(shrank)}, more than the tolerance {general(tolerance)} ulp"


def grew_share_of_budget(change: str, fraction, budget, still: str) -> str:
    """'max_ulp 0.5 -> 0.9: grew by more than 10% of the 2 ulp budget, still agree'."""
    return f"{change}: grew by more than {share(fraction)} of the {general(budget)} ulp budget, still {still}"


# ---- check's answer: the lines a user reads first ---------------------------------------------

# said when no catalogued bug, knob change, other convention or fit explains the disagreement
NO_BUG = ("bug: not identified: no catalogued bug, single knob change, other convention or fitted eps, scale or "
          "statistic matches its outputs")


def the_bug(name: str, fix: str) -> str:
    """'bug: eps-outside-sqrt -- fix: yours: ...; qwen3: ...': the bug the diagnosis is convinced
    of, and the sentence that says what differs."""
    return f"bug: {name} -- fix: {fix}"


def closest_bug(name: str, matched: int, of: int) -> str:
    """'bug: not identified; the closest, eps-ignored, explains only 7 of the 30 disagreeing cases
    examined': a candidate too weak to be named as the bug."""
    return (f"bug: not identified; the closest, {name}, explains only {matched} of the {of} disagreeing cases "
            "examined")


def chain_bug(convention: str, count: int) -> str:
    """'bug: no catalogued one; its outputs round where qwen3.5 does not ...': every disagreeing case
    is within its budget and off the contract's rounding chain, and no change explains it."""
    return (f"bug: no catalogued one; its outputs round where {convention} does not: all {count} disagreeing cases "
            "are off its rounding chain or within one rounding of its budget (an extra rounding to the input dtype, "
            "or one in another place)")


def fitted_bug(says: str) -> str:
    """'bug: no catalogued one; fitted: your eps acts ...': only a fit explains it."""
    return f"bug: no catalogued one; fitted: {says}"


def check_summary(target: str, verdict: str, bug: str, count: int, total: int, reason: str = "") -> str:
    """One line for a failing check (the `Failed:` line of pytest's short summary): 'normdiff check
    my_norm.py:f: disagrees, eps-outside-sqrt (24 of 78 cases)'. `bug` is the diagnosed bug's id
    ('' when none is convincing); `count` the cases the verdict is about (the disagreeing ones, the
    ones that could not run for partial, the agreeing ones for agrees); `reason` why nothing ran."""
    said = f"normdiff check {target}: {verdict}"
    if verdict == "error":
        return f"{said}, {reason}"
    if verdict == "disagrees":
        return f"{said}, {bug or 'bug not identified'} ({count} of {total} cases)"
    if verdict == "partial":
        return f"{said}, {count} of {total} cases could not run"
    return f"{said} ({count} of {total} cases)"


# ---- check without --convention: which conventions the code computes -------------------------

# The rule that names the closest convention when none agrees (harness/commands/identify.py ranks by it)
CLOSEST_RULE = ("closest: the convention under which the largest share of the cases agree; among equals, one whose "
                "disagreement a diagnosis explains (a catalogued bug or one change), then the one whose worst case "
                "is the smallest multiple of its budget; conventions still equal are named together")


def agrees_with(conventions, op: str) -> str:
    """'agrees with: qwen3, llama (rms_norm)': the conventions whose every case agrees."""
    return f"agrees with: {', '.join(conventions)} ({op})"


def agrees_where_it_ran(conventions, op: str) -> str:
    """'agrees where its cases ran with: qwen3 (rms_norm); some could not run': none agrees on every
    case, these on every case that ran."""
    return f"agrees where its cases ran with: {', '.join(conventions)} ({op}); some could not run"


def agrees_with_none(op: str, closest, differs: str) -> str:
    """'agrees with no convention (rms_norm); closest: gemma3 -- differs by ...': the closest
    conventions (CLOSEST_RULE) and what differs from the first of them."""
    return f"agrees with no convention ({op}); closest: {', '.join(closest)} -- {differs}"


def differs_by(bug: str, fix: str) -> str:
    """'differs by eps-outside-sqrt: yours: ...; qwen3: ...' (a catalogued bug), or 'differs: yours:
    ...; gemma3: ...' (a change no bug is filed for)."""
    return f"differs by {bug}: {fix}" if bug else f"differs: {fix}"
