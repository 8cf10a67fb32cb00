#!/usr/bin/env python3
"""Compare two results.csv files byte for byte, without their timing columns.

A refactor that must not change what normdiff measures is checked this way: run the default suite
before and after, then

    python scripts/compare_results.py BEFORE/results.csv AFTER/results.csv

Timing columns (`seconds`) differ on every run and are dropped; every other byte must be equal. The
script prints the row and column counts, the SHA-256 of each file without its timing columns, and,
when they differ, the first differing rows and the columns they differ in. Exit status 0 when
identical, 1 otherwise. Needs only the standard library.
"""
from __future__ import annotations

import csv
import hashlib
import io
import sys

TIMING_COLUMNS = ("seconds",)


def without_timing(path: str) -> tuple[list[str], list[list[str]], bytes]:
    """(header, rows, the file's bytes as csv writes them back) with the timing columns dropped."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    if not rows:
        raise SystemExit(f"{path}: empty file")
    keep = [i for i, name in enumerate(rows[0]) if name not in TIMING_COLUMNS]
    kept = [[row[i] for i in keep] for row in rows]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(kept)
    return kept[0], kept[1:], buf.getvalue().encode("utf-8")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[0] + "\nusage: compare_results.py BEFORE.csv AFTER.csv", file=sys.stderr)
        return 2
    (head_a, rows_a, bytes_a), (head_b, rows_b, bytes_b) = (without_timing(p) for p in argv)
    for path, head, rows, data in ((argv[0], head_a, rows_a, bytes_a), (argv[1], head_b, rows_b, bytes_b)):
        print(f"{path}: {len(rows)} rows x {len(head)} columns without {', '.join(TIMING_COLUMNS)}; "
              f"sha256 {hashlib.sha256(data).hexdigest()}")
    if bytes_a == bytes_b:
        print("byte-identical without the timing columns")
        return 0
    if head_a != head_b:
        print(f"columns differ: only before {sorted(set(head_a) - set(head_b))}, "
              f"only after {sorted(set(head_b) - set(head_a))}")
    shown = 0
    for index, (a, b) in enumerate(zip(rows_a, rows_b), start=2):
        if a != b and shown < 5:
            cols = [h for h, x, y in zip(head_a, a, b) if x != y]
            print(f"line {index} differs in {', '.join(cols)}: {a[0]}")
            shown += 1
    if len(rows_a) != len(rows_b):
        print(f"row counts differ: {len(rows_a)} before, {len(rows_b)} after")
    print("DIFFERENT")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
