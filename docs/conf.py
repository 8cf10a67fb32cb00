"""Sphinx configuration of normdiff's documentation site (`make docs`; tests/docs/test_notebook.py
builds it with -W --keep-going -n, so a warning or a broken cross-reference fails the tests).

Pages are Markdown (MyST, through myst-nb, which also executes teaching.ipynb on every build); the
API reference is autodoc over the public modules' docstrings; the CLI reference is argparse's own
help text, rendered at build time by _ext/normdiff_cli.py.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

# The notebook's kernel is this Python, the project's venv, on any machine: the ipykernel wheel's
# "python3" spec (argv "python", which jupyter_client replaces by sys.executable) lies in the venv,
# and the venv's specs come before any user-level or system-wide "python3" spec.
os.environ["JUPYTER_PREFER_ENV_PATH"] = "1"

project = "normdiff"
author = "the normdiff developers"
copyright = "the normdiff developers"

extensions = [
    "myst_nb",  # Markdown pages (myst-parser) and executed notebooks
    "sphinx.ext.autodoc",
    "normdiff_cli",
]

exclude_patterns = ["_build", "**.ipynb_checkpoints"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links are checked like any reference
myst_enable_extensions = ["colon_fence"]

# The teaching notebook runs on every build; an error in a cell fails the build.
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 300
nb_kernel_rgx_aliases = {".*": "python3"}  # whatever kernel name the notebook was saved with

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
# Types of other projects: this build is offline (no intersphinx inventories), so references into
# their documentation cannot resolve; every other reference must.
nitpick_ignore_regex = [
    ("py:class", r"(pandas|pd|numpy|np|hypothesis|st|collections\.abc|typing|pathlib|os)\..*"),
]


def _by_last_name(app, env, node, contnode):
    """A Python class named in an annotation as its module imports it (`suites.Suite`,
    `Implementation`: the annotations are postponed, so autodoc keeps their text) resolves to the
    one documented class of that name; a name documented nowhere, or twice, stays unresolved."""
    if node.get("refdomain") != "py" or node.get("reftype") != "class":
        return None
    last = node["reftarget"].rpartition(".")[2]
    domain = env.get_domain("py")
    found = [name for name, obj in domain.objects.items() if obj.objtype == "class" and name.rpartition(".")[2] == last]
    if len(found) != 1:
        return None
    return domain.resolve_xref(env, node["refdoc"], app.builder, "class", found[0], node, contnode)


def setup(app):
    app.connect("missing-reference", _by_last_name)

smartquotes = False  # `--timeout` in a docstring stays two hyphens, quotes stay as typed

html_theme = "furo"
html_title = "normdiff"
