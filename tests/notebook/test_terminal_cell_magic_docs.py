"""What docs/notebook.md tells a terminal ``ipython`` user about running a multi-line
``%%ray_train`` cell holds for the installed IPython: Enter continues a cell magic, an
empty line (or one auto-indentation left with spaces) ends it, and Esc then Enter runs it
as it stands."""

from __future__ import annotations

from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "notebook.md"
CELL = "%%ray_train --workers 2 --epochs 3\nfor epoch in epochs:\n    report({'epoch': epoch})"


def test_the_docs_say_how_to_run_a_cell_magic_in_a_terminal():
    text = " ".join(DOC.read_text().split())
    assert "Esc, then Enter" in text and "Alt+Enter" in text
    assert "press Enter on an empty line" in text and "%load_ext raynb" in text


def test_ipython_continues_a_cell_magic_until_an_empty_line():
    pytest.importorskip("IPython")
    from IPython.core.inputtransformer2 import TransformerManager

    check = TransformerManager().check_complete
    assert check(CELL + "\n")[0] == "incomplete"  # Enter after a line of the cell: a new line
    assert check(CELL + "\n\n")[0] == "complete"  # Enter on an empty line runs it
    assert check(CELL + "\n    \n")[0] == "complete"  # ... also one holding auto-indentation


def test_esc_enter_runs_the_cell_as_it_stands():
    pytest.importorskip("IPython")
    from IPython.terminal import shortcuts

    bound = {tuple(b.keys): b.command.__name__ for b in shortcuts.KEY_BINDINGS}
    assert bound[("escape", "enter")] == "reformat_and_execute", bound.get(("escape", "enter"))
    assert bound[("enter",)] == "handle_return_or_newline_or_execute"
