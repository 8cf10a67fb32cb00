"""The view registry: every view of a report, one file per view in this folder.

A view (reports/view.py) declares its name, its place in the report (`order`), how it is derived from the report's
long table (`derive`, computed once per report and cached), and its renderings: the files it adds
to the report folder (`files`: name -> text, e.g. its CSV; `owns` lists them), its section of summary.md (`markdown`)
and its section of report.html (`html`, with `nav` naming the page's link to it). A rendering that
returns "" (or a view without it) adds nothing. reports/render.py writes every view's files,
reports/markdown.py and reports/html.py join the sections in order; nothing else needs to know a
view exists, so adding one is adding a file here (CONTRIBUTING.md).
"""
from __future__ import annotations

import importlib
import pkgutil

from normdiff.harness.data.errors import UsageError
from normdiff.harness.data.names import unknown
from normdiff.reports.view import View


def _discover() -> dict[str, View]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found += [v for v in vars(module).values() if isinstance(v, View)]
    names = [v.name for v in found]
    if len(set(names)) != len(names):
        raise RuntimeError(f"two views share a name: {sorted(n for n in names if names.count(n) > 1)}")
    return {v.name: v for v in sorted(found, key=lambda v: (v.order, v.name))}


VIEWS: dict[str, View] = _discover()


def get_view(name: str) -> View:
    if name not in VIEWS:
        raise UsageError(unknown("view", name, VIEWS))
    return VIEWS[name]
