"""Every command output shown in README.md and docs/ is what the command prints now.

scripts/regen_docs_outputs.py defines the markers, where the commands run and what may differ
between two correct runs (`normalise`: timings, versions, paths, the digits of measured floats;
never a count, a verdict, a case id or a line). Each marked command sequence is one test, run once
and compared with every place that shows it; the tests are grouped in a class per page so that
xdist's loadscope spreads the pages over its workers. A failure prints the difference and the
command that regenerates the block.
"""
from __future__ import annotations

import difflib
import re
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))  # the script is the one definition of markers and normalise
import regen_docs_outputs as regen  # noqa: E402

MARKERS = regen.markers()
SHELL_WORDS = {"cd"}


def test_every_text_block_is_a_marked_output_and_every_marker_marks_one():
    """A ```text block is an output: run by a marker, or a dated measurement (a benchmark's)."""
    missing = [f"{page.relative_to(ROOT)}:{line}" for page, line in regen.unmarked_blocks()]
    assert not missing, f"```text blocks without an output or measured marker: {missing}"
    stray = [f"{page.relative_to(ROOT)}:{line}" for page, line in regen.stray_markers()]
    assert not stray, f"markers not followed by a ```text block (a measured one needs its date): {stray}"


def test_the_markers_are_found():
    pages = {page.name for marker in MARKERS for page, _, _ in marker.places}
    assert len(MARKERS) >= 10 and {"README.md", "check.md", "quickstart-ci.md"} <= pages


def test_normalise_keeps_counts_and_case_ids_and_lets_timings_drift():
    shown = "  AGREES: 45 of 45 cases agree; worst 1.41 ulp (rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-4/w=trained) in 9.9 s"
    assert regen.normalise(shown) == regen.normalise(shown.replace("1.41", "1.39").replace("9.9 s", "12.0 s"))
    assert regen.normalise(shown) != regen.normalise(shown.replace("45 of 45", "44 of 45"))
    assert regen.normalise(shown) != regen.normalise(shown.replace("1e-4", "1e-3"))
    assert regen.normalise("torch 2.13.0+cpu, saved 2026-12-05") == regen.normalise("torch 2.14.1, saved 2027-01-02")
    assert regen.normalise("a budget of 2") != regen.normalise("a budget of 2.01")
    assert regen.normalise("(154 case evaluations, 492 per second)") == regen.normalise("(154 case evaluations, 45.6 per second)")


def _missing_programs(marker) -> list[str]:
    path = regen._environment()["PATH"]
    firsts = {line.split()[0] for line in marker.lines}
    return sorted(w for w in firsts - SHELL_WORDS if shutil.which(w, path=path) is None)


def _check(marker):
    missing = _missing_programs(marker)
    if missing:
        pytest.skip(f"not on this machine: {', '.join(missing)}")
    outputs = regen.run(marker)
    for page, line, commands in marker.places:
        fresh = regen.normalise(regen.render(commands, outputs))
        for shown in regen.shown_blocks(page, commands):
            if regen.normalise(shown) != fresh:
                diff = "\n".join(difflib.unified_diff(regen.normalise(shown), fresh, "shown", "printed now",
                                                      lineterm="", n=1))
                pytest.fail(f"{page.relative_to(ROOT)}:{line} shows an output that `{marker.lines[-1]}` no "
                            f"longer prints (compared after normalise):\n{diff}\nregenerate it with: "
                            f".venv/bin/python scripts/regen_docs_outputs.py '{marker.lines[-1]}'", pytrace=False)


def _class_name(page: Path) -> str:
    return "TestShownIn_" + re.sub(r"\W", "_", page.stem)


def _page_class(page: Path, markers: list) -> type:
    @pytest.mark.slow
    @pytest.mark.parametrize("marker", markers, ids=[m.name for m in markers])
    def test_output(self, marker):
        _check(marker)

    return type(_class_name(page), (), {"test_output": test_output})


# one class per page (the first page that shows a marker), so loadscope gives each page a worker
for _page in dict.fromkeys(m.places[0][0] for m in MARKERS):
    globals()[_class_name(_page)] = _page_class(_page, [m for m in MARKERS if m.places[0][0] == _page])
