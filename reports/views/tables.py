"""The two long tables themselves, as the report folder's first files."""
from __future__ import annotations

from normdiff.reports.view import View, csv_file

RESULTS = View("results", 0, derive=lambda report: report.results, files=csv_file("results.csv"),
               owns=("results.csv",),
              describes=(("results.csv", "one row per case x implementation (every view here derives from it)"),))
PAIRS = View("pairs", 1, derive=lambda report: report.pairs, files=csv_file("pairs.csv"),
             owns=("pairs.csv",),
            describes=(("pairs.csv", "one row per case x pair of implementations"),))
