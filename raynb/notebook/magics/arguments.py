"""Argument parsing shared by the magics: options in IPython's style, and Python
expressions as option values (``--config dict(lr=1e-3)``, ``--space {...}``)."""

from __future__ import annotations

import argparse
import ast
import re
import shlex

from IPython.core.error import UsageError


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def workers_arg(text: str):
    """argparse type for ``--workers``: ``4`` (a fixed world size) or ``2-4`` (elastic:
    ``num_workers=(2, 4)``, Ray Train v2's min and max)."""
    lo, sep, hi = text.partition("-")
    if not sep or not lo:  # "4", or "-2" (a negative count, named as such)
        return positive_int(text)
    a, b = positive_int(lo), positive_int(hi)
    if a > b:
        raise argparse.ArgumentTypeError(f"expected MIN-MAX with MIN <= MAX, got {text!r}")
    return (a, b)


class MagicParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors and --help are IPython UsageErrors (no SystemExit).

    Options are taken only as spelled out: argparse's prefix matching made the typo
    ``--worker 2`` mean ``--workers 2`` (and would make a new option change what an old
    abbreviation means)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def print_help(self, file=None):
        """--help: nothing printed here; ``exit`` raises the help as the UsageError (it was shown twice)."""

    def error(self, message):
        raise UsageError(f"{self.format_usage().strip()}\n{self.prog}: {message}")

    def exit(self, status=0, message=None):  # --help
        raise UsageError(self.format_help())

    def parse_line(self, line: str):
        try:
            words = shlex.split(line)
        except ValueError as e:  # an unclosed quote
            self.error(str(e))
        return self.parse_args(words)


_NEXT_OPTION = re.compile(r"\s+--?[A-Za-z]")


def split_expression(
    line: str, option: str, strict: bool = False, call: str | None = None
) -> tuple[str, str | None]:
    """Take ``option EXPR`` out of a magic line before shell-style splitting.

    EXPR is Python (``--config dict(lr=1e-3)``, ``--space {"lr": loguniform(1e-4, 1e-1)}``),
    so it may hold spaces and quotes that shlex would split or strip. It ends at the
    first following option (`` --name``) before which the text parses as an
    expression. A quoted value (``--config "{...}"``) is left to shlex. With ``call``,
    EXPR is what goes between the parentheses of ``call(...)`` (``--data train=ds,val=v``
    for ``call="dict"``).

    Returns:
        (the line without ``option EXPR``, EXPR), or (line, None) when ``option`` is
        absent, quoted, or (not ``strict``) no prefix parses: the usual parsing reports it.

    Raises:
        UsageError: ``strict`` and no prefix of the text after ``option`` parses.
    """
    m = re.search(rf"(?:^|\s){re.escape(option)}(?:=|\s+)(?=\S)", line)
    if m is None or line[m.end()] in "'\"":
        return line, None
    rest = line[m.end() :]
    error = None
    for end in [o.start() for o in _NEXT_OPTION.finditer(rest)] + [len(rest)]:
        expr = rest[:end].strip()
        try:
            ast.parse(f"{call}({expr})" if call else expr, mode="eval")
        except SyntaxError as e:
            error = e
            continue
        return line[: m.start()] + rest[end:], expr
    if strict:
        raise UsageError(f"{option} {rest.strip()!r} failed to evaluate: SyntaxError: {error.msg}")
    return line, None
