"""docs/teaching.ipynb runs from top to bottom, and says what it teaches: each of the three classic bugs
flagged by name, the right functions agreeing, the plots drawn, the report and the checks shown as
their HTML; and the documentation site builds strictly with it (the build is here, on the notebook
executed once: executing it again in the build would double the cost of the slowest docs test).

The notebook is executed as the docs build executes it (nbclient), in a kernel that runs this very
interpreter (a kernel spec written into a temporary folder and handed to the kernel manager: no
kernel needs to be installed anywhere). It is stored without outputs; this test's copy gets them.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import re
import sys
import time
from pathlib import Path

import pytest

nbclient = pytest.importorskip("nbclient", reason="the notebook test needs nbclient and ipykernel (the docs extra)")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "teaching.ipynb"
KERNEL = "normdiff-test"
TIMEOUT = 300  # seconds per cell: the whole notebook takes well under a minute


def kernel_manager(folder: Path):
    """A kernel manager whose kernel is `sys.executable -m ipykernel_launcher`, found through a kernel
    spec in `folder` only (not ~/.local/share/jupyter, not the environment's)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec = folder / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "normdiff's interpreter", "language": "python"}))
    specs = KernelSpecManager(kernel_dirs=[str(folder / "kernels")], ensure_native_kernel=False)
    return KernelManager(kernel_name=KERNEL, kernel_spec_manager=specs)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook after execution (its cells with outputs) and how long it took, in seconds."""
    folder = tmp_path_factory.mktemp("notebook")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(notebook, km=kernel_manager(folder), timeout=TIMEOUT,
                                     resources={"metadata": {"path": str(folder)}})  # run where nothing is
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any error
    return notebook, time.perf_counter() - start


def text_of(cell) -> str:
    """A code cell's printed text and text results."""
    parts = []
    for out in cell.get("outputs", []):
        if out["output_type"] == "stream":
            parts.append(out["text"])
        elif out["output_type"] in ("execute_result", "display_data"):
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def outputs(notebook, kind: str) -> list[str]:
    return [out["data"][kind] for cell in notebook.cells if cell.cell_type == "code"
            for out in cell.get("outputs", []) if kind in out.get("data", {})]


def test_the_notebook_is_stored_without_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_it_runs_without_an_error(executed):
    notebook, seconds = executed
    errors = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.outputs
              if out["output_type"] == "error" or out.get("name") == "stderr" and "Traceback" in out["text"]]
    assert not errors, errors
    assert seconds < TIMEOUT


def facts(notebook) -> dict[str, str]:
    """The notebook's closing facts: each function's check summary and what the run found, by name."""
    (cell,) = [c for c in notebook.cells if c.cell_type == "code" and "normdiff check " in text_of(c)]
    said = {}
    for line in text_of(cell).splitlines():
        if line.startswith("normdiff check "):
            said["check " + line.split(":")[0].removeprefix("normdiff check ")] = line
        elif ": disagrees on " in line:
            said["run " + line.split(":")[0]] = line
    return said


def test_its_last_facts_flag_each_classic_bug_and_pass_the_right_functions(executed):
    notebook, _ = executed
    said = facts(notebook)
    for name, bug in (("rms_norm_eps_outside", "eps-outside-sqrt"), ("rms_norm_gamma_plus_one", "gamma-plus-one"),
                      ("qk_norm_full_vector", "qk-norm-full-vector")):
        assert re.fullmatch(rf"normdiff check {name}: disagrees, {bug} \(\d+ of \d+ cases\)", said[f"check {name}"])
        assert not re.match(rf"{name}: disagrees on 0 ", said[f"run {name}"]), said[f"run {name}"]
    for name in ("rms_norm", "qk_norm"):
        assert re.fullmatch(rf"normdiff check {name}: agrees \((\d+) of \1 cases\)", said[f"check {name}"])
        assert re.fullmatch(rf"{name}: disagrees on 0 of \d+ cases; caught in: none; passes everywhere in: .+",
                            said[f"run {name}"])


def test_each_bug_hides_and_shows_where_the_notebook_says(executed):
    notebook, _ = executed
    said = facts(notebook)

    def regimes(name, which):
        return said[f"run {name}"].split(f"{which}: ")[1].split(";")[0].split(", ")

    # eps outside the square root: invisible on N(0, 1) rows, caught on tiny ones only
    assert regimes("rms_norm_eps_outside", "caught in") == ["tiny_rms"]
    assert "normal" in regimes("rms_norm_eps_outside", "passes everywhere in")
    # 1 + gamma and the full-vector QK-Norm: wrong wherever a reference looks (the plots show how)
    for name in ("rms_norm_gamma_plus_one", "qk_norm_full_vector"):
        assert regimes(name, "passes everywhere in") == ["none"] and "normal" in regimes(name, "caught in")
    assert "head_scales" in regimes("qk_norm_full_vector", "caught in")


def test_the_report_and_the_checks_show_themselves_answer_first(executed):
    notebook, _ = executed
    shown = [html for html in outputs(notebook, "text/html") if 'class="normdiff-repr"' in html]
    report, *checks = shown
    assert "Some implementation disagrees with the reference: qk_norm_full_vector, rms_norm_eps_outside, " \
           "rms_norm_gamma_plus_one" in report
    assert [re.search(r"<b>bug: ([\w-]+) -- fix:", c).group(1) for c in checks] == \
        ["eps-outside-sqrt", "gamma-plus-one", "qk-norm-full-vector"]


def test_the_plots_are_drawn_from_the_run(executed):
    notebook, _ = executed
    assert len(outputs(notebook, "image/png")) == 3  # the eps sweep, gamma's scatter, the per-head RMS
    tables = [t for t in outputs(notebook, "text/plain") if "assert_close passes" in t]
    assert len(tables) == 3  # one at-a-glance table per bug


@pytest.mark.slow
def test_the_docs_build_without_a_warning(executed, tmp_path):
    """`sphinx-build -W --keep-going -n` turns every warning, a broken cross-reference or link, into a
    failure. It builds a copy of docs/ holding the notebook as executed above, with myst-nb's own
    execution off (`make docs` executes it); into tmp_path, never into the repository."""
    for module in ("sphinx", "myst_nb", "furo"):
        pytest.importorskip(module, reason="the docs extra (pip install -e '.[docs]'; make installs it)")
    docs = tmp_path / "docs"
    shutil.copytree(NOTEBOOK.parent, docs, ignore=shutil.ignore_patterns("_build", "*.ipynb_checkpoints"))
    nbformat.write(executed[0], docs / NOTEBOOK.name)
    done = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-b", "html",
                           "-D", "nb_execution_mode=off", "-d", str(tmp_path / "doctrees"), str(docs),
                           str(tmp_path / "html")], capture_output=True, text=True, timeout=900, check=False)
    problems = [line for line in (done.stdout + done.stderr).splitlines() if "WARNING" in line or "ERROR" in line]
    assert done.returncode == 0, "\n".join(problems) or done.stderr[-4000:]
    page = (tmp_path / "html" / "teaching.html").read_text()
    assert (tmp_path / "html" / "index.html").exists() and "<img" in page  # the plots, from the run above
