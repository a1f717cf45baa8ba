"""Reading each array length a generated function uses several times once, into a local.

numba lowers every `x.shape[k]` on its own: the array's whole struct is stored to the stack
and its shape loaded back, about 1.2 ms of compile time each (measured: `view(a, (a.shape[1],
a.shape[0]))` 6.0 ms a statement, 2.7 ms with both lengths in locals). A program's function
reads the same lengths over and over (its checks, allocations and loop bounds: 320 reads in
the transformer block's gradient), so `read_lengths_once` rewrites its text: the length gets
a local right after the array's one binding, and the reads use it.
"""

from __future__ import annotations

import ast

__all__ = ["read_lengths_once"]


def read_lengths_once(text: str) -> str:
    """`text` (one function's source) with every `name.shape[k]` read more than once, of a
    name bound once and by a plain statement (or a parameter), read from a local instead."""
    tree = ast.parse(text)
    fn = tree.body[0]
    if not isinstance(fn, ast.FunctionDef):
        return text
    bindings: dict[str, list] = {}
    for a in fn.args.args:
        bindings.setdefault(a.arg, []).append(None)  # (None: before the first statement)
    reads: dict[tuple[str, int], list] = {}
    names = {a.arg for a in fn.args.args}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name):
            names.add(node.id)
            if not isinstance(node.ctx, ast.Load):
                bindings.setdefault(node.id, []).append(node)
        elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load)
              and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
              and isinstance(node.value.value, ast.Name)
              and isinstance(node.slice, ast.Constant) and type(node.slice.value) is int):
            reads.setdefault((node.value.value.id, node.slice.value), []).append(node)
    statements = _plain_statements(fn)
    lines = text.split("\n")
    inserts: dict[int, list[str]] = {}  # line index -> lines to insert after it
    edits: dict[int, list] = {}  # line index -> [(start col, end col, local)]
    for (name, k), found in reads.items():
        bound = bindings.get(name, ())
        if len(found) < 2 or len(bound) != 1:
            continue
        if bound[0] is None:  # a parameter: read at the top of the body
            at, indent = fn.body[0].lineno - 2, fn.body[0].col_offset
        else:
            statement = statements.get(id(bound[0]))
            if statement is None or lines[statement.lineno - 1][:statement.col_offset].strip():
                continue  # (bound by a loop header, or after a compound line's colon)
            at, indent = statement.end_lineno - 1, statement.col_offset
        local = f"{name}_n{k}"
        if local in names:
            continue
        names.add(local)
        inserts.setdefault(at, []).append(f"{' ' * indent}{local} = {name}.shape[{k}]")
        for node in found:
            if node.lineno - 1 <= at or node.lineno != node.end_lineno:
                continue  # (a read before the binding's line: left as it is)
            edits.setdefault(node.lineno - 1, []).append(
                (node.col_offset, node.end_col_offset, local))
    if not inserts:
        return text
    for i, spans in edits.items():
        line = lines[i]
        for start, end, local in sorted(spans, reverse=True):
            line = line[:start] + local + line[end:]
        lines[i] = line
    out = []
    for i, line in enumerate(lines):
        out.append(line)
        out.extend(inserts.get(i, ()))
    return "\n".join(out)


def _plain_statements(fn) -> dict[int, ast.stmt]:
    """{id(target Name): its assignment statement}."""
    found = {}
    for node in ast.walk(fn):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        found[id(name)] = node
    return found
