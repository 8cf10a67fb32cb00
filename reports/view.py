"""A view of a report: its name, its place, how it is derived from the long table and how it
renders. The views themselves are one file each in reports/views/ (its __init__ finds them)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


def _nothing(*args) -> Any:
    return None


@dataclass(frozen=True)
class View:
    name: str
    order: int
    derive: Callable[[Any], Any] = _nothing  # (report) -> data
    files: Callable[[Any, Any], dict[str, str]] | None = None  # (report, data) -> {file name: text}
    markdown: Callable[[Any, Any], str] | None = None  # (report, data) -> summary.md section
    html: Callable[[Any, Any, Any], str] | None = None  # (report, data, page) -> report.html section
    nav: str = ""  # the page's link text (the section's id is the view's name)
    owns: tuple[str, ...] = ()  # the files `files` may write (a run's manifest lists what it wrote)
    describes: tuple[tuple[str, str], ...] = ()  # (file names, what they hold), for the page's file list


def csv_file(name: str, index: bool = False) -> Callable[[Any, Any], dict[str, str]]:
    """`files` for a view whose data is one DataFrame written as `name` (nothing when it is None)."""
    def files(report, frame) -> dict[str, str]:
        return {} if frame is None else {name: frame.to_csv(index=index)}
    return files
