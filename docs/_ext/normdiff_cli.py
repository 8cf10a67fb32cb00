"""The CLI reference (cli.md) as argparse prints it, so it is the parser's own text on every build
and cannot go stale:

    ```{normdiff-help}
    ```

shows `normdiff --help`, then a section per subcommand with its `--help`, in the parser's order (a
subcommand added to the parser appears with no change here); `{normdiff-help} check` shows one.
Rendered 100 columns wide, as in a terminal of that width.
"""
from __future__ import annotations

import argparse
import os

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

WIDTH = "100"


def _parser() -> argparse.ArgumentParser:
    from normdiff.harness.commands import cli

    return cli._parser()


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def help_text(parser: argparse.ArgumentParser) -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH  # argparse's HelpFormatter reads the width when it is made
    try:
        return parser.format_help()
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous


def _block(text: str) -> nodes.literal_block:
    return nodes.literal_block(text, text, language="none")


class NormdiffHelp(SphinxDirective):
    optional_arguments = 1
    has_content = False

    def run(self):
        parser = _parser()
        subs = subcommands(parser)
        if self.arguments:
            name = self.arguments[0]
            if name not in subs:
                raise self.error(f"normdiff has no subcommand {name!r}; it has {', '.join(subs)}")
            return [_block(help_text(subs[name]))]
        shown = [_block(help_text(parser))]
        for name, sub in subs.items():
            title = f"normdiff {name}"
            section = nodes.section(ids=[nodes.make_id(title)], names=[nodes.fully_normalize_name(title)])
            section += nodes.title(title, title)
            section += _block(help_text(sub))
            self.state.document.note_implicit_target(section, section)
            shown.append(section)
        return shown


def setup(app):
    app.add_directive("normdiff-help", NormdiffHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
