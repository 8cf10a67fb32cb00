"""The one clock every report reads: UTC, and fixed by SOURCE_DATE_EPOCH when it is set (so two runs
of the same code can write byte-identical files; https://reproducible-builds.org/specs/source-date-epoch/).

Pure: imports nothing from normdiff.
"""
from __future__ import annotations

import datetime
import os


def utc_now() -> datetime.datetime:
    """Now in UTC (aware), or the moment SOURCE_DATE_EPOCH names when it is a whole number."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if epoch.isdigit():
        return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc)
    return datetime.datetime.now(datetime.timezone.utc)
