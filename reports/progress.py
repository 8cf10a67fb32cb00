"""A progress bar for terminals (kept apart from the pandas renderers so the CLI can show it
before pandas is imported)."""
from __future__ import annotations

import sys


def progress_printer(stream=None):
    """A one-line progress bar when `stream` (default: the current sys.stderr) is a terminal;
    otherwise nothing."""
    stream = sys.stderr if stream is None else stream
    if not stream.isatty():
        return None

    def show(done: int, total: int) -> None:
        width = 30
        filled = int(width * done / max(total, 1))
        stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} case x implementation")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show
