"""Imports go one way.

Every module of the package is read with `ast` (every import, at the top and inside functions)
and assigned a layer; a module imports only from its own layer or the layers below:

    layer      modules                                   what it is
    0 config   verglas.config, verglas.logger            the switches (VERGLAS_* variables);
                                                         the "verglas" logger
    1 graph    verglas.graph (incl. graph.reference)     the IR; the reference executor, which
                                                         runs a frozen graph through each op's
                                                         `perform`
    2 ops      verglas.ops                               the array language (with `vjp`: the
                                                         inner-graph ops differentiate their
                                                         bodies)
    3 grad     verglas.grad                              the user's `grad`
    4 rewrite  verglas.rewrite                           rewrites, registry, pipeline
    5 sched    verglas.schedule                          Program: steps, buffers, memory plan
    6 source   verglas.source, verglas.scalar_code       what both code generators share
    7 protocol verglas.backend, verglas.cache            the backend protocol and registry; the
                                                         on-disk cache every backend uses
    8 backends verglas.*_backend (cpu_backend,           one package (or module) per backend,
               cuda_backend, reference_backend)          registered by device name
    9 func     verglas.function, verglas.testing,        compile() and Function; verify_grad;
               verglas.artifact                          saved Functions (save / load)
   10 api      verglas (__init__), verglas.demo,         the public names (importing every
               verglas.__main__, verglas.dask            backend); a demo script; the CLI;
                                                         Functions on a dask cluster

Within a layer, packages import each other without cycles (the backends import none of each
other), and the modules' top-level imports form a DAG: no cycle is closed by an import
inside a function. Imports inside functions are for optional third-party packages; the few
of verglas itself are listed in ALLOWED, each with why it cannot be at the top.
"""

from __future__ import annotations

import ast
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

import verglas

ROOT = Path(verglas.__file__).parent

# (a prefix with a `*` matches by pattern: a new backend package needs no line here)
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("config", ("verglas.config", "verglas.logger")),
    ("graph", ("verglas.graph",)),
    ("ops", ("verglas.ops",)),
    ("grad", ("verglas.grad",)),
    ("rewrite", ("verglas.rewrite",)),
    ("schedule", ("verglas.schedule",)),
    ("source", ("verglas.source", "verglas.scalar_code", "verglas.complex_code")),
    ("protocol", ("verglas.backend", "verglas.cache", "verglas.compile_helper")),
    ("backends", ("verglas.*_backend",)),
    ("function", ("verglas.function", "verglas.testing", "verglas.artifact")),
    ("api", ("verglas", "verglas.demo", "verglas.__main__", "verglas.dask")),
)

# (importing module, imported module) -> why the import sits inside a function
ALLOWED: dict[tuple[str, str], str] = {
    ("verglas.graph.fg", "verglas.graph.frozen"):
        "FunctionGraph.freeze: the way in to the frozen IR, whose unfreeze() (the way out) "
        "builds a FunctionGraph, so frozen.py imports this module",
    ("verglas.ops.scan.op", "verglas.ops.scan.grad"):
        "Scan.L_op: the gradient is a backward Scan that grad.py builds with build.py's "
        "scan_buffers, and build.py imports this module (the op)",
    ("verglas.cuda_backend", "verglas.cuda_backend.runtime"):
        "CUDABackend.runner: the CUDA code generator and runtime load when a program asks "
        "for device='cuda' (registering the backend, at `import verglas`, loads neither)",
}


# -- reading the package --------------------------------------------------------------------------
def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_sources(root: Path = ROOT) -> dict[str, tuple[str, bool]]:
    """module name -> (source, is a package __init__) for every module under `root`."""
    return {module_name(p, root): (p.read_text(), p.name == "__init__.py")
            for p in sorted(root.rglob("*.py"))}


def imports_of(name: str, source: str, is_package: bool, modules) -> list[tuple[str, int, str]]:
    """(imported verglas module, line, enclosing function or "") for each import in `source`.

    `from a import b` names module a.b when that is a module, else a (b is an attribute).
    """
    tree = ast.parse(source)
    found = []

    def visit(node, function: str):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, getattr(child, "name", "<lambda>"))
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append((alias.name, child.lineno, function))
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = name.split(".") if is_package else name.split(".")[:-1]
                    parts = parts[:len(parts) - (child.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    found.append((sub if sub in modules else base, child.lineno, function))
            visit(child, function)

    visit(tree, "")
    return [(target, line, fn) for target, line, fn in found
            if target == "verglas" or target.startswith("verglas.")]


def layer_of(name: str) -> int:
    best, best_len = None, -1
    for k, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if "*" in prefix:  # a pattern: the module it matches, or one inside it
                parts = name.split(".")
                found = next((".".join(parts[:n]) for n in range(len(parts), 0, -1)
                              if fnmatchcase(".".join(parts[:n]), prefix)), None)
                if found is not None and found.count(".") == prefix.count(".") \
                        and len(prefix) > best_len:
                    best, best_len = k, len(prefix)
                continue
            inside = name.startswith(prefix + ".") and prefix != "verglas"  # (the root: itself)
            if (name == prefix or inside) and len(prefix) > best_len:
                best, best_len = k, len(prefix)
    if best is None:
        raise KeyError(f"{name} has no layer: add it to LAYERS in tests/test_imports.py")
    return best


def package_of(name: str) -> str:
    """The unit of the package-level check: verglas.<first part> (a subpackage or module)."""
    parts = name.split(".")
    return ".".join(parts[:2])


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one member (Tarjan)."""
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    out = []
    counter = [0]

    def strongconnect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            strongconnect(v)
    return out


def violations(sources: dict[str, tuple[str, bool]], allowed=ALLOWED) -> list[str]:
    """Every breach of the import rules in `sources` (module name -> (source, is_package))."""
    problems = []
    top: dict[str, set[str]] = {name: set() for name in sources}
    packages: dict[str, set[str]] = {}
    for name, (source, is_package) in sources.items():
        try:
            layer = layer_of(name)
        except KeyError as exc:
            problems.append(str(exc))
            continue
        for target, line, function in imports_of(name, source, is_package, sources):
            where = f"{name}:{line}"
            if target not in sources:
                problems.append(f"{where} imports {target}, which is not a module of verglas")
                continue
            try:
                target_layer = layer_of(target)
            except KeyError:
                continue  # reported as a module without a layer
            if target_layer > layer:
                problems.append(f"{where} imports {target}: layer {LAYERS[target_layer][0]} "
                                f"is above {LAYERS[layer][0]}")
            if package_of(target) != package_of(name):
                packages.setdefault(package_of(name), set()).add(package_of(target))
            if not function:
                if target != name:
                    top[name].add(target)
            elif (name, target) not in allowed:
                problems.append(f"{where} imports {target} inside {function}(): move it to the "
                                f"top, or list it in ALLOWED with the reason it cannot be there")
    for cycle in _cycles(packages):
        problems.append(f"packages import each other: {' <-> '.join(cycle)}")
    for cycle in _cycles(top):
        problems.append(f"modules import each other at the top: {' <-> '.join(cycle)}")
    return list(dict.fromkeys(problems))  # (one line per import statement)


# -- the package ----------------------------------------------------------------------------------
def test_imports_go_one_way():
    problems = violations(package_sources())
    assert not problems, "\n".join(problems)


def test_every_allowed_import_is_still_there():
    sources = package_sources()
    used = {(name, target) for name, (source, is_package) in sources.items()
            for target, _, function in imports_of(name, source, is_package, sources) if function}
    assert set(ALLOWED) <= used, f"stale ALLOWED entries: {sorted(set(ALLOWED) - used)}"


# -- the checker catches what it should -----------------------------------------------------------
def _package(**modules: str) -> dict[str, tuple[str, bool]]:
    """Module sources keyed by dotted name ("verglas.ops.a"); packages for every prefix."""
    out = {name.replace("__", "."): (src, False) for name, src in modules.items()}
    for name in list(out):
        parts = name.split(".")
        for k in range(1, len(parts)):
            out.setdefault(".".join(parts[:k]), ("", True))
    return out


@pytest.mark.parametrize("modules, expected", [
    (dict(verglas__graph__a="from verglas.ops import b", verglas__ops__b=""),
     "layer ops is above graph"),
    (dict(verglas__graph__a="def f():\n    import verglas.ops.b\n", verglas__ops__b=""),
     "layer ops is above graph"),
    (dict(verglas__ops__a="from verglas.ops import b",
          verglas__ops__b="def f():\n    from verglas.ops import a\n"),
     "inside f()"),
    (dict(verglas__ops__a="from verglas.ops.b import x",
          verglas__ops__b="from verglas.ops import a"),
     "modules import each other at the top: verglas.ops.a <-> verglas.ops.b"),
    (dict(verglas__cpu_backend__a="from verglas.cuda_backend import b",
          verglas__cuda_backend__b="def f():\n    from verglas.cpu_backend import a\n"),
     "packages import each other: verglas.cpu_backend <-> verglas.cuda_backend"),
    (dict(verglas__nowhere="import numpy"), "verglas.nowhere has no layer"),
    (dict(verglas__tpu_backend__a="from verglas.function import f", verglas__function=""),
     "layer function is above backends"),  # (a new backend is in its layer by its name)
    (dict(verglas__tpu_backend="from verglas.cpu_backend import a",
          verglas__cpu_backend__a="from verglas import tpu_backend"),
     "packages import each other: verglas.cpu_backend <-> verglas.tpu_backend"),
])
def test_checker_reports(modules, expected):
    problems = violations(_package(**modules), allowed={})
    assert any(expected in p for p in problems), problems


def test_checker_accepts_downward_imports_and_allowed_ones():
    modules = _package(verglas__graph__a="", verglas__ops__b="from verglas.graph import a",
                       verglas__ops__c="def f():\n    from verglas.ops import b\n")
    assert violations(modules, allowed={("verglas.ops.c", "verglas.ops.b"): "why"}) == []
