"""Turning a ``%%ray_train`` cell body into a training function ``f(config)``.

The body is compiled as the body of a function whose line numbers are the
cell's own (the magic line is line 1), so a remote traceback points at the line
the user sees. The notebook variables the body reads are bound as the
function's globals, which is what cloudpickle ships; the raynb training API is
bound too, so the cell needs no imports.
"""

from __future__ import annotations

import ast
import builtins
import re
import types
from dataclasses import dataclass

from ...train import session as _session
from ...train import torch as _train_torch

# Usable in a cell without imports.
CELL_API = {
    "report": _session.report,
    "get_context": _session.get_context,
    "get_checkpoint": _session.get_checkpoint,
    "prepare_model": _train_torch.prepare_model,
    "prepare_data_loader": _train_torch.prepare_data_loader,
    "get_device": _train_torch.get_device,
}

_LOCALS = "__raynb_locals__"
# IPython's own names in the user namespace (history, shell handles): never shipped.
_IPYTHON_NAMES = re.compile(r"^(In|Out|get_ipython|exit|quit|_ih|_oh|_dh|_+\d*|_i+\d*)$")


@dataclass
class CellFunction:
    fn: types.FunctionType
    filename: str
    source: str  # the whole cell, magic line included (for linecache)
    captured: dict  # notebook name -> value the body reads


def _assigned_names(body: list[ast.stmt]) -> set[str]:
    """Names bound at the function's own scope (they are locals, not captured)."""
    names: set[str] = set()

    class V(ast.NodeVisitor):
        def visit_Name(self, node):
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.id)

        def visit_FunctionDef(self, node):
            names.add(node.name)  # the def binds its name; its body is another scope

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_ClassDef(self, node):
            names.add(node.name)

        def visit_Lambda(self, node):
            pass

        def visit_Import(self, node):
            for a in node.names:
                names.add((a.asname or a.name).split(".")[0])

        visit_ImportFrom = visit_Import

        def visit_Global(self, node):
            pass

    for stmt in body:
        V().visit(stmt)
    return names


def _read_names(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _return_out(out: list[str], last: int) -> list[ast.stmt]:
    """The statements that return the ``out`` names the body assigned, numbered after the
    body's ``last`` line (none without ``out``)."""
    # __raynb_locals__ = locals(); return {n: __raynb_locals__[n] for n in out if n in it}
    tail = (
        ast.parse(
            f"{_LOCALS} = locals()\n"
            f"return {{__n: {_LOCALS}[__n] for __n in {list(out)!r} if __n in {_LOCALS}}}",
            mode="exec",
        ).body
        if out
        else []
    )
    for stmt in tail:
        ast.increment_lineno(stmt, last - 1)
    return tail


def _function_module(func_name: str, body: list[ast.stmt]) -> ast.Module:
    """A module holding ``def func_name(config): body``, the def on the magic's line 1."""
    extra = {"type_params": []} if "type_params" in ast.FunctionDef._fields else {}
    func = ast.FunctionDef(
        name=func_name,
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(arg="config")],
            vararg=None,
            kwonlyargs=[],
            kw_defaults=[],
            kwarg=None,
            defaults=[],
        ),
        body=body,
        decorator_list=[],
        returns=None,
        lineno=1,
        col_offset=0,
        **extra,
    )
    return ast.Module(body=[func], type_ignores=[])


def build_cell_function(
    cell: str,
    user_ns: dict,
    *,
    magic_line: str = "%%ray_train",
    out: list[str] = (),
    filename: str = "<ray_train cell>",
    func_name: str = "ray_train_cell",
) -> CellFunction:
    """Compile ``cell`` into ``f(config)`` returning ``{name: value}`` for ``out``.

    Args:
        cell: the cell body (without the magic line).
        user_ns: the notebook's namespace; names the body reads are taken from it.
        magic_line: the cell's first line, kept for tracebacks.
        out: local names whose values rank 0 returns (``--out``).
        filename: the code's filename in tracebacks.
        func_name: the function's name in tracebacks (``ray_tune_cell`` for ``%%ray_tune``).

    Raises:
        SyntaxError: the body does not parse (line numbers are the cell's).
    """
    source = magic_line.rstrip("\n") + "\n" + cell
    tree = ast.parse(cell, filename=filename)
    ast.increment_lineno(tree, 1)  # body line 1 is cell line 2
    body = tree.body or [ast.Pass(lineno=2, col_offset=0)]
    last = body[-1].end_lineno or 2
    tail = _return_out(out, last)
    module = _function_module(func_name, body + tail)
    ast.fix_missing_locations(module)
    code = compile(module, filename, "exec")

    local = _assigned_names(body) | {"config"}
    wanted = (_read_names(tree) - local) | (_read_names(tree) & set(_global_decls(tree)))
    captured = {
        n: user_ns[n]
        for n in sorted(wanted)
        if n in user_ns and n not in CELL_API and not _IPYTHON_NAMES.match(n)
    }
    # A module name cloudpickle cannot import makes it ship the function by value.
    glb = {"__name__": "__raynb_cell__", "__builtins__": builtins}
    glb.update(CELL_API)
    glb.update(captured)
    exec(code, glb)
    fn = glb[func_name]
    return CellFunction(fn, filename, source, captured)


def _global_decls(tree: ast.AST) -> list[str]:
    return [n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names]
