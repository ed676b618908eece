"""The magics' options as Markdown tables, generated from their argparse parsers, so the
docs' reference (``docs/magics.md``) never disagrees with what the magics accept:
``python -m raynb.notebook.magics.reference > docs/magics.md``."""

from __future__ import annotations

import argparse

from .ray_train import _cluster_parser, _train_parser
from .ray_tune import tune_parser


def _default(action: argparse.Action) -> str:
    if action.default in (None, False, "", argparse.SUPPRESS) or action.nargs == 0:
        return ""
    return f"`{action.default}`"


def _spelling(action: argparse.Action) -> str:
    if not action.option_strings:
        meta = action.metavar or action.dest
        return f"`{meta}`" + (f" ({', '.join(map(str, action.choices))})" if action.choices else "")
    value = ""
    if action.nargs != 0:
        meta = action.metavar or (
            ("{" + ",".join(map(str, action.choices)) + "}") if action.choices else action.dest.upper()
        )
        value = f" [{meta}]" if action.nargs == "?" else f" {meta}"
    return ", ".join(f"`{o}{value}`" for o in action.option_strings)


def table(parser: argparse.ArgumentParser) -> str:
    """One parser's options: spelling, default and help, in the parser's order."""
    rows = ["| option | default | what it does |", "| --- | --- | --- |"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        help_text = (action.help or "").replace("|", "\\|").replace("%%", "%")
        spelling = _spelling(action).replace("|", "\\|")
        rows.append(f"| {spelling} | {_default(action)} | {help_text} |")
    return "\n".join(rows)


def markdown() -> str:
    """The whole reference page."""
    parts = [
        "# Magics reference",
        "",
        "Generated from the magics' parsers (`python -m raynb.notebook.magics.reference`). "
        "The guides ([the notebook](notebook.md), [Tune](tune.md)) show them in use.",
        "",
    ]
    for title, parser in (
        ("`%%ray_train`", _train_parser()),
        ("`%%ray_tune`", tune_parser()),
        ("`%ray_cluster`", _cluster_parser()),
    ):
        parts += [f"## {title}", "", (parser.description or "").strip(), "", table(parser), ""]
    return "\n".join(parts)


if __name__ == "__main__":  # pragma: no cover - a docs generator
    print(markdown(), end="")
