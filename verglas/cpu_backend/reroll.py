"""Loop rerolling of the program function's text: a run of identical statement blocks calling
generated kernels becomes one loop.

(A pass over generated text, kept until the scheduler says such runs itself. The loops
inside kernels, a Composite's runs of like terms, are written structurally from its scalar
graph: see scalar_code.term_runs.)

numba's compile time grows with every statement of a function (a call of a jitted function
costs it ~5-10 ms to type and lower), and a program such as a sum of hundreds of terms calls
the same shared kernel (see kernels._emit_elemwise_shared) from block after block that differ
only in which packed inputs and constants they read. Such a run of K blocks becomes

    for c in range(K):
        <the first block, its varying offsets and constants indexed by c>

The blocks must be equal token by token, except for:
- the names each block binds (matched by the order of their first binding);
- names a block reads that the previous block bound at a fixed position (the value carried
  from iteration to iteration, e.g. an accumulator written inplace): the first block reads
  an outer buffer of the same dtype and rank there, copied into the loop variable beforehand;
- integer offsets into packed-input arrays and pools (`pkJ[N]`, `zo + N`) that step by a
  constant from block to block;
- scalar constant globals (numpy scalars), read from a global array indexed by c.
Names the last block binds that later code reads are bound again after the loop.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["reroll"]

MIN_REPEATS = 3  # fewer repetitions are left as they are
MIN_SAVED = 6  # nor runs that would save fewer statements than this
MAX_PERIOD = 48  # statements in one block at most
_CALL = re.compile(r"\b(?:kern|sub)\d+\(")  # only blocks that call a generated function

_TOKEN = re.compile(r"""'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[A-Za-z_]\w*"""
                    r"""|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\S""")
_BIND = re.compile(r"^\s*((?:[A-Za-z_]\w*\s*,\s*)*[A-Za-z_]\w*)\s*=(?!=)")
_FOR = re.compile(r"^\s*for\s+([A-Za-z_]\w*)\s+in\b")
_PACKED = re.compile(r"pk\d+$")


class _Stmt:
    """One top-level statement: its lines (the first at depth 1), tokens and bound names."""

    def __init__(self, lines: list[str], comments=()):
        self.lines = lines
        self.comments = list(comments)
        # tokens: (line index, start, end, text); each line's indentation is a token too
        self.tokens = []
        self.binds = []
        for k, line in enumerate(lines):
            indent = len(line) - len(line.lstrip(" "))
            self.tokens.append((k, 0, 0, " " * indent))
            self.tokens.extend((k, m.start(), m.end(), m.group()) for m in _TOKEN.finditer(line))
            m = _BIND.match(line) or _FOR.match(line)
            if m:
                self.binds.extend(n.strip() for n in m.group(1).split(","))
        self.calls = bool(_CALL.search("\n".join(lines)))


def _statements(lines: list[str]):
    """The top-level statements of a function body; comment lines at depth 1 go with the
    statement they precede (`comments`) and take no part in the comparison."""
    stmts: list[_Stmt] = []
    current: list[str] = []
    comments: list[str] = []
    pending: list[str] = []
    for line in lines:
        top = line.startswith("    ") and not line.startswith("     ")
        if top and line.lstrip().startswith("#"):
            pending.append(line)
            continue
        if top and current:
            stmts.append(_Stmt(current, comments))
            current, comments = [], []
        if top:
            comments, pending = pending, []
        current.append(line)
    if current:
        stmts.append(_Stmt(current, comments))
    if pending:  # trailing comments: kept with an empty statement
        stmts.append(_Stmt([], pending))
    return stmts


def _is_ident(text: str) -> bool:
    return text[0].isalpha() or text[0] == "_"


def _signature(stmt: _Stmt, bound: set, consts: dict) -> tuple:
    """The statement's tokens with bound names, scalar constants and integers abstracted."""
    out = []
    for _, _, _, text in stmt.tokens:
        if text in bound:
            out.append("§b")
        elif text in consts:
            out.append("§k")
        elif text.isdigit():
            out.append("§n")
        else:
            out.append(text)
    return tuple(out)


def _offset_context(tokens, k) -> bool:
    """Whether integer token k is an offset that may step: `zo + N` or `pkJ[N]`."""
    prev = tokens[k - 1][3] if k >= 1 else ""
    prev2 = tokens[k - 2][3] if k >= 2 else ""
    nxt = tokens[k + 1][3] if k + 1 < len(tokens) else ""
    return (prev == "+" and prev2 == "zo") or (prev == "[" and bool(_PACKED.match(prev2))
                                                and nxt == "]")


class _Plan:
    def __init__(self, start, period, repeats):
        self.start, self.period, self.repeats = start, period, repeats
        self.carried: dict[int, int] = {}  # token index -> bound position read from before
        self.steps: dict[int, int] = {}  # token index of an offset -> its step
        self.varying: dict[int, list] = {}  # token index of a constant -> its names


def _check(stmts, plan: _Plan, buffer_type, consts) -> int:
    """How many of the plan's blocks hold (from the first), filling in the plan's maps."""
    p, start = plan.period, plan.start
    blocks = [stmts[start + r * p:start + (r + 1) * p] for r in range(plan.repeats)]

    def flat(block):
        toks, owner = [], []
        for s, stmt in enumerate(block):
            toks.extend(stmt.tokens)
            owner.extend([s] * len(stmt.tokens))
        return toks, owner

    def positions(block):
        pos = {}
        for stmt in block:
            for n in stmt.binds:
                pos.setdefault(n, len(pos))
        return pos

    toks0, owner = flat(blocks[0])
    pos0 = positions(blocks[0])
    names0 = list(pos0)
    bind_stmt = {}  # position -> statement of the block binding it first
    for s, stmt in enumerate(blocks[0]):
        for n in stmt.binds:
            bind_stmt.setdefault(pos0[n], s)
    invariant: set[int] = set()
    carried_outer: dict[int, str] = {}  # position -> the outer name block 0 reads there
    prev_pos = pos0
    for r in range(1, plan.repeats):
        toks, _ = flat(blocks[r])
        pos = positions(blocks[r])
        if len(toks) != len(toks0) or len(pos) != len(pos0):
            return r
        for k, (tok0, tok) in enumerate(zip(toks0, toks)):
            a, b = tok0[3], tok[3]
            if a in pos0:
                if pos.get(b) != pos0[a]:
                    return r
            elif a.isdigit() and b.isdigit() and _offset_context(toks0, k):
                step = plan.steps.setdefault(k, int(b) - int(a))
                if int(b) != int(a) + r * step:
                    return r
            elif k in plan.varying:  # (equal values share one global: b may be a again)
                if b not in consts or consts[b].dtype != consts[a].dtype:
                    return r
                plan.varying[k].append(b)
            elif a == b:
                if k in plan.carried:
                    return r
                invariant.add(k)
            elif not (_is_ident(a) and _is_ident(b)) or k in invariant:
                return r
            elif b in prev_pos:  # a value carried from the previous block
                q = prev_pos[b]
                if plan.carried.setdefault(k, q) != q or carried_outer.setdefault(q, a) != a:
                    return r
                if r == 1 and not _carry_ok(a, names0[q], owner[k], bind_stmt[q], blocks[0],
                                            buffer_type):
                    return r
            elif a in consts and b in consts and consts[a].dtype == consts[b].dtype \
                    and k not in plan.carried and r == 1:
                plan.varying[k] = [a, b]
            else:
                return r
        prev_pos = pos
    return plan.repeats


def _carry_ok(outer, local, use_stmt, bind_stmt, block, buffer_type) -> bool:
    """Whether `local` (bound in the block) can carry `outer`'s role into the next block."""
    t_outer, t_local = buffer_type(outer), buffer_type(local)
    if t_outer is None or t_outer != t_local:
        return False
    if use_stmt < bind_stmt:
        return True
    stmt = block[bind_stmt]
    if len(stmt.lines) != 1 or stmt.binds != [local]:
        return False
    if use_stmt == bind_stmt:  # read on the right of the assignment that rebinds it
        return True
    # read after `local = outer`: an alias, so the new value is the old one
    return [t[3] for t in stmt.tokens[1:]] == [local, "=", outer]


def reroll(lines: list[str], src, buffer_type) -> list[str]:
    """`lines` (a function body at depth 1) with runs of repeated blocks rerolled.

    `buffer_type(name)` gives (dtype, ndim) of a buffer variable, None for other names.
    """
    if len(_CALL.findall("\n".join(lines))) < MIN_REPEATS:
        return lines
    stmts = _statements(lines)
    consts = {n: v for n, v in src.globals.items() if isinstance(v, np.generic)}
    bound = {n for s in stmts for n in s.binds}
    ids: dict[tuple, int] = {}
    sigs = [ids.setdefault(_signature(s, bound, consts), len(ids)) for s in stmts]
    n = len(stmts)
    # same[p][i]: how many statements from i on equal the one p further (signatures only)
    same = {}
    for p in range(1, min(MAX_PERIOD, n // MIN_REPEATS) + 1):
        run = [0] * (n + 1)
        for i in range(n - p - 1, -1, -1):
            run[i] = run[i + 1] + 1 if sigs[i] == sigs[i + p] else 0
        same[p] = run
    out: list[str] = []
    i = 0
    while i < n:
        plan = _best_run(stmts, same, i, buffer_type, consts)
        if plan is None:
            out.extend(stmts[i].comments + stmts[i].lines)
            i += 1
            continue
        end = plan.start + plan.period * plan.repeats
        out.extend(_emit(stmts, plan, src, stmts[end:]))
        i = end
    return out


def _best_run(stmts, same, i, buffer_type, consts):
    """The verified run starting at statement i that saves the most statements, or None."""
    candidates = []
    for p, run in same.items():
        r = min(1 + run[i] // p, (len(stmts) - i) // p)
        if r >= MIN_REPEATS and p * (r - 1) >= MIN_SAVED and any(
                s.calls for s in stmts[i:i + p]):
            candidates.append((p * (r - 1), -p, r))
    for _, neg_p, r in sorted(candidates, reverse=True):
        plan = _Plan(i, -neg_p, r)
        held = _check(stmts, plan, buffer_type, consts)
        if held < r:
            plan = _Plan(i, -neg_p, held)
            if held < MIN_REPEATS or plan.period * (held - 1) < MIN_SAVED or \
                    _check(stmts, plan, buffer_type, consts) < held:
                continue
        end = i + plan.period * plan.repeats
        early = {n for stmt in stmts[i:end - plan.period] for n in stmt.binds}
        if any(tok[3] in early for stmt in stmts[end:] for tok in stmt.tokens):
            continue  # later code reads a value of a block before the last
        return plan
    return None


def _emit(stmts, plan: _Plan, src, lines_after) -> list[str]:
    p, r0 = plan.period, plan.start
    block = stmts[r0:r0 + p]
    last = stmts[r0 + (plan.repeats - 1) * p:r0 + plan.repeats * p]
    c = src.emitter.fresh("rr")
    edits: dict[tuple[int, int], list] = {}  # (statement, line) -> [(start, end, text)]
    k = 0
    names0, names_last = [], []
    for stmt in block:
        for n in stmt.binds:
            if n not in names0:
                names0.append(n)
    for stmt in last:
        for n in stmt.binds:
            if n not in names_last:
                names_last.append(n)
    out = [f"    # {plan.repeats} repetitions of one block (rerolled)"]
    for s, stmt in enumerate(block):
        for line_no, start, end, text in stmt.tokens:
            if k in plan.carried:
                edits.setdefault((s, line_no), []).append((start, end, names0[plan.carried[k]]))
            elif plan.steps.get(k):
                edits.setdefault((s, line_no), []).append(
                    (start, end, f"{text} + {plan.steps[k]} * {c}"))
            elif k in plan.varying:
                values = [src.globals[name] for name in plan.varying[k]]
                arr = src.add_global("rk", np.array(values, dtype=values[0].dtype))
                edits.setdefault((s, line_no), []).append((start, end, f"{arr}[{c}]"))
            k += 1
    for k, q in sorted(set(plan.carried.items()), key=lambda kq: kq[1]):
        outer = _token(block, k)
        line = f"    {names0[q]} = {outer}"
        if line not in out:
            out.append(line)
    out.append(f"    for {c} in range({plan.repeats}):")
    for s, stmt in enumerate(block):
        out.extend("    " + line for line in stmt.comments)  # (the first block's)
        for line_no, line in enumerate(stmt.lines):
            for start, end, text in sorted(edits.get((s, line_no), []), reverse=True):
                line = line[:start] + text + line[end:]
            out.append("    " + line)
    later = {tok[3] for stmt in lines_after for tok in stmt.tokens}
    for a, b in zip(names_last, names0):
        if a in later and a != b:
            out.append(f"    {a} = {b}")
    return out


def _token(block, k) -> str:
    for stmt in block:
        if k < len(stmt.tokens):
            return stmt.tokens[k][3]
        k -= len(stmt.tokens)
    raise IndexError(k)
