"""Regenerate every command output shown in README.md and docs/*.md by running the command.

    .venv/bin/python scripts/regen_docs_outputs.py            # rewrite every shown output
    .venv/bin/python scripts/regen_docs_outputs.py --list     # the marked commands, where each is shown
    .venv/bin/python scripts/regen_docs_outputs.py 'check'    # only markers whose commands contain 'check'

tests/docs/test_shown_outputs.py runs each marked command once and fails when an output shown no
longer matches what it prints, after `normalise` (below): so a shown output never goes stale.

## The marker

An output is shown as an HTML comment naming the command(s), followed at once by a fenced block
whose info string is `text`:

    <!-- output: normdiff check examples/python/my_norm.py:rms_norm --op rms_norm -c qwen3 -->
    ```text
    $ normdiff check examples/python/my_norm.py:rms_norm --op rms_norm -c qwen3
    ...what it printed...
    ```

The comment may hold several commands, one a line; they run in turn in one folder (a later one sees
the files an earlier one wrote: a compiled program, a saved baseline), and the block shows each as
`$ COMMAND` followed by its output, a blank line between them. A command line may end with one
option after `  # `:

    # lines: 1..3, -2..-1   show only these lines of its output (1-based, negative from the end,
                            `A..B` inclusive); a line `...` stands where lines are left out
    # quiet                 show the command but none of its output (a set-up step)

The same commands marked in several places (the README and a docs page) run once, and each place
keeps its own options: one shows the whole output, another its first lines.

Every ```text block of those pages must be marked: by this marker, or by
`<!-- measured: WHAT, YYYY-MM-DD -->` for a dated measurement the tests cannot repeat (a benchmark's
timings), which this script leaves alone.

## Where a command runs

In a fresh temporary folder holding a link to each top-level entry of the repository (so
`tests/...` and `examples/...` paths work as in a checkout, and whatever the command writes, a report
folder or a compiled program, lands in the temporary folder), through `bash -c`, with this Python's
bin folder (the venv's `normdiff`, `python`, `pytest`) first on PATH, COLUMNS=100, NO_COLOR=1, CI unset;
stdout and stderr together, as a terminal shows them, each command within TIMEOUT seconds.

What the block holds is the output as printed, with three rewrites that make it read as in a
checkout: the temporary folder's path and the repository's path are removed (a path prints as
`tests/fixtures/x.py`), and the home folder is written `~`; trailing spaces are dropped.

## How a shown output is compared with a fresh one (`normalise`)

Both are normalised, then compared line by line: the same lines in the same order. What must match
exactly is the structure and every count; what may drift is what differs between two correct runs
(timings, machines, library versions) and the last digits of measured errors:

  * every integer stays as it is: counts ("45 of 45", "24 disagree", "FOUND after 9 examples"),
    shapes, percentages, row and column numbers;
  * a number with a decimal point or an exponent (1.41, 3.55e+03, 0.9 in "0.9 s") becomes `<f>`,
    its sign kept: a measured error, a timing or a budget may change in its digits, not in being a
    number there (a float that prints as an integer, a budget of 2, is an integer and must match);
  * except inside a case id (a word with `@` and `/`: rms_norm@qwen3/bf16/8x1024/tiny_rms:1e-4),
    which must match to the letter;
  * a rate ("492 per second", "45.6 per second") becomes `<rate>`: a timing, though it prints as an
    integer when it is large;
  * a version (three dot-separated numbers and what follows them: 2.13.0+cpu) becomes `<version>`,
    a date (2026-12-04) `<date>`, a hexadecimal digest of 8 or more digits `<hex>`, and a path in
    the temporary folder `<tmp>`;
  * runs of spaces become one space (columns widen with their numbers), and trailing spaces go.

So a changed count, a changed verdict, a new or vanished line, another bug named, another case id or
another word fails the test; 1.41 ulp becoming 1.39 does not.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 180  # seconds one command may take
SKIP_LINKS = {".git", ".venv", ".pytest_cache", "normdiff-report"}

# a comment's text never runs past its own `-->`
MARKER = re.compile(r"<!-- output:(?P<commands>(?:(?!-->).)*?)-->\n```text\n(?P<block>.*?)```\n", re.DOTALL)
MEASURED = re.compile(r"<!-- measured: (?:(?!-->).)*?\d{4}-\d{2}-\d{2}(?:(?!-->).)*?-->\n```text\n", re.DOTALL)
OPENING = re.compile(r"<!-- (output|measured):")
FENCE = re.compile(r"^```text$", re.MULTILINE)
OPTION = re.compile(r"^(?P<command>.*?)\s+#\s*(?P<option>lines:\s*[-0-9., ]+|quiet)\s*$")


def pages() -> list[Path]:
    """The Markdown pages whose outputs are marked: the README and every page of the docs site."""
    docs = ROOT / "docs"
    found = sorted(p for p in docs.rglob("*.md") if "_build" not in p.relative_to(docs).parts)
    return [ROOT / "README.md", *found]


@dataclass(frozen=True)
class Command:
    line: str  # as run and shown
    lines: str = ""  # the `lines:` spec, empty for the whole output
    quiet: bool = False


@dataclass
class Marker:
    """One command sequence, run once, and every place that shows it (each with its own options)."""
    lines: tuple[str, ...]
    places: list[tuple[Path, int, tuple[Command, ...]]] = field(default_factory=list)  # page, line, as marked

    @property
    def name(self) -> str:
        """A short id: the last command's words after `normdiff` (the test's parameter id)."""
        words = self.lines[-1].split()
        if words and words[0] == "normdiff":
            words = words[1:]
        return " ".join(words)[:100]

    def where(self) -> str:
        return ", ".join(f"{page.relative_to(ROOT)}:{line}" for page, line, _ in self.places)


def parse_commands(text: str) -> tuple[Command, ...]:
    commands = []
    for raw in text.strip().splitlines():
        raw = raw.strip()
        if not raw:
            continue
        m = OPTION.match(raw)
        if not m:
            commands.append(Command(raw))
        elif m["option"] == "quiet":
            commands.append(Command(m["command"], quiet=True))
        else:
            commands.append(Command(m["command"], lines=m["option"].split(":", 1)[1].strip()))
    if not commands:
        raise ValueError("an output marker without a command")
    return tuple(commands)


def markers(paths=None) -> list[Marker]:
    """Every distinct marked command sequence, with the places that show it (README first)."""
    found: dict[tuple, Marker] = {}
    for page in paths or pages():
        text = page.read_text()
        for m in MARKER.finditer(text):
            commands = parse_commands(m["commands"])
            key = tuple(c.line for c in commands)
            found.setdefault(key, Marker(key)).places.append((page, text.count("\n", 0, m.start()) + 1, commands))
    return list(found.values())


def shown_blocks(page: Path, commands: tuple[Command, ...]) -> list[str]:
    """The blocks `page` shows under a marker of exactly these commands and options."""
    return [m["block"] for m in MARKER.finditer(page.read_text()) if parse_commands(m["commands"]) == commands]


def unmarked_blocks(paths=None) -> list[tuple[Path, int]]:
    """```text blocks that neither an output marker nor a measured marker announces."""
    missing = []
    for page in paths or pages():
        text = page.read_text()
        marked = {m.start("block") for m in MARKER.finditer(text)}
        marked |= {m.end() for m in MEASURED.finditer(text)}
        for fence in FENCE.finditer(text):
            if fence.end() + 1 not in marked:
                missing.append((page, text.count("\n", 0, fence.start()) + 1))
    return missing


def stray_markers(paths=None) -> list[tuple[Path, int]]:
    """Output or measured markers not followed at once by a ```text block (or a measured one
    without its date): they would mark nothing."""
    stray = []
    for page in paths or pages():
        text = page.read_text()
        fine = {m.start() for m in MARKER.finditer(text)} | {m.start() for m in MEASURED.finditer(text)}
        stray += [(page, text.count("\n", 0, m.start()) + 1) for m in OPENING.finditer(text) if m.start() not in fine]
    return stray


def _select(lines: list[str], spec: str) -> list[str]:
    """The lines a `lines:` spec keeps, with `...` where lines are left out."""
    n = len(lines)
    keep: list[int] = []
    for item in spec.split(","):
        item = item.strip()
        first, _, last = item.partition("..")
        a = int(first)
        b = int(last) if last else a
        a, b = (a - 1 if a > 0 else n + a), (b - 1 if b > 0 else n + b)
        if not (0 <= a <= b < n):
            raise ValueError(f"lines: {item!r} is outside an output of {n} lines")
        keep.extend(range(a, b + 1))
    shown, previous = [], -1
    for i in sorted(set(keep)):
        if i != previous + 1:
            shown.append("...")
        shown.append(lines[i])
        previous = i
    if previous != n - 1:
        shown.append("...")
    return shown


def _sandbox() -> Path:
    folder = Path(tempfile.mkdtemp(prefix="normdiff-docs-"))
    for entry in ROOT.iterdir():
        if entry.name not in SKIP_LINKS:
            (folder / entry.name).symlink_to(entry)
    return folder


def _environment() -> dict:
    # CI and BUILD_NUMBER dropped: pytest stops shortening its summary lines when it sees them, so a
    # shown pytest output would differ between a CI machine and a desk.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_", "NORMDIFF_TEST")) and k not in ("CI", "BUILD_NUMBER")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update(COLUMNS="100", NO_COLOR="1", TERM="dumb")
    return env


def _as_in_a_checkout(text: str, sandbox: Path) -> str:
    for folder in {str(sandbox), os.path.realpath(sandbox), str(ROOT)}:
        text = text.replace(folder + "/", "").replace(folder, ".")
    home = os.path.expanduser("~")
    if home not in ("", "/"):
        text = text.replace(home + "/", "~/")
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


def run(marker: Marker) -> list[str]:
    """Run the marker's commands in turn, in one sandbox; each one's output as in a checkout."""
    sandbox = _sandbox()
    try:
        outputs = []
        for line in marker.lines:
            done = subprocess.run(["bash", "-c", line], cwd=sandbox, env=_environment(), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=TIMEOUT, check=False)
            outputs.append(_as_in_a_checkout(done.stdout.decode("utf-8", "replace"), sandbox))
        return outputs
    finally:
        shutil.rmtree(sandbox, ignore_errors=True)


def render(commands: tuple[Command, ...], outputs: list[str]) -> str:
    """The block a marker with these commands and options shows, from the commands' outputs."""
    sections = []
    for command, output in zip(commands, outputs):
        lines = [] if command.quiet or not output else output.split("\n")
        if command.lines:
            lines = _select(lines, command.lines)
        sections.append("\n".join([f"$ {command.line}", *lines]))
    return "\n\n".join(sections) + "\n"


# -- normalise: what two correct runs may differ in (the module's docstring) ------------------------
CASE_ID = re.compile(r"\S*@\S*/\S*")
VERSION = re.compile(r"(?<![\w.])\d+\.\d+\.\d+[\w.+-]*")
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{8,}\b")
FLOAT = re.compile(r"(?<![\w.])(?:\d+\.\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)(?![\d.])")
TMP = re.compile(re.escape(tempfile.gettempdir()) + r"/[^\s:'\")]*")
RATE = re.compile(r"(?<![\w.])\d+(?:\.\d*)?(?= per second)")  # 154 or 45.6: a timing either way


def _normalise_words(text: str) -> str:
    text = TMP.sub("<tmp>", text)
    text = VERSION.sub("<version>", text)
    text = DATE.sub("<date>", text)
    text = HEX.sub("<hex>", text)
    text = RATE.sub("<rate>", text)
    return FLOAT.sub("<f>", text)


def normalise_line(line: str) -> str:
    parts, last = [], 0
    for m in CASE_ID.finditer(line):  # case ids match to the letter
        parts += [_normalise_words(line[last:m.start()]), m.group()]
        last = m.end()
    parts.append(_normalise_words(line[last:]))
    return re.sub(r" +", " ", "".join(parts)).rstrip()


def normalise(block: str) -> list[str]:
    return [normalise_line(line) for line in block.strip("\n").split("\n")]


def rewrite(marker: Marker, outputs: list[str]) -> list[Path]:
    """Write the outputs into every place that shows the marker; returns the pages changed."""
    changed = []
    for page in dict.fromkeys(page for page, _, _ in marker.places):
        text = page.read_text()

        def replace(m):
            commands = parse_commands(m["commands"])
            if tuple(c.line for c in commands) != marker.lines:
                return m.group()
            return f"<!-- output:{m['commands']}-->\n```text\n{render(commands, outputs)}```\n"

        new = MARKER.sub(replace, text)
        if new != text:
            page.write_text(new)
            changed.append(page)
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("only", nargs="*", help="regenerate only markers whose commands contain one of these")
    parser.add_argument("--list", action="store_true", help="list the marked commands and where each is shown")
    args = parser.parse_args(argv)
    chosen = [m for m in markers() if not args.only or any(o in line for o in args.only for line in m.lines)]
    for page, line in unmarked_blocks():
        print(f"{page.relative_to(ROOT)}:{line}: a ```text block without an output or measured marker")
    for page, line in stray_markers():
        print(f"{page.relative_to(ROOT)}:{line}: a marker without its ```text block (or a measured one without a date)")
    for marker in chosen:
        if args.list:
            print(f"{marker.name}\n    {marker.where()}")
            continue
        changed = rewrite(marker, run(marker))
        print(f"{'rewrote' if changed else 'unchanged'}: {marker.name} ({marker.where()})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
