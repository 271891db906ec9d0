"""
The import graph of ``pulsar_twisted`` and the layering it must follow, read with ``ast`` (no
module is imported, so this works on a tree that does not import cleanly).

Every import is counted: at module level and inside functions and classes, ``import a.b``,
``from a import b``, relative ``from . import x`` / ``from ..y import z`` (resolved against the
importing module's package), and ``importlib.import_module("...")`` with a constant name.

The layering (REDESIGN.md section 2), lowest first::

    proto -> common -> wire -> net -> metadata -> resources -> {bookie, ledger} -> mledger
          -> security -> {broker, proxy} -> functions -> {web, cli} -> daemons

A layer may import itself and any layer below it; the two layers of a pair in braces may not
import each other. ``config.py`` counts as ``common``. ``client`` (the Pulsar client library) may
import only ``common``, ``wire``, ``net`` and ``proto``; it sits beside the server tree, so only
the tools built on it (``cli``), the proxy (``proxy``: its broker connections are client
connections), the composition roots (``daemons``) and ``testing`` may import it. ``proxy`` sits
beside ``broker``: neither imports the other.
``testing`` may import anything except ``daemons``, and only ``testing`` imports ``testing``.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

ROOT_PACKAGE = "pulsar_twisted"

#: Layer -> rank; equal ranks are siblings that may not import each other.
RANKS = {
    "proto": 0, "common": 1, "wire": 2, "net": 3, "metadata": 4, "resources": 5,
    "bookie": 6, "ledger": 6, "mledger": 7, "security": 8, "broker": 9, "proxy": 9,
    "functions": 10, "web": 11, "cli": 11, "daemons": 12,
}
CLIENT_MAY_IMPORT = frozenset({"common", "wire", "net", "proto"})
CLIENT_IMPORTED_BY = frozenset({"cli", "daemons", "proxy", "testing", "functions"})
#: ``functions`` (the functions worker) is a client of the platform: it ranks above ``broker`` so
#: that ``web`` may serve its admin API, yet imports only these layers, never the broker's.
FUNCTIONS_MAY_IMPORT = frozenset({"proto", "common", "wire", "net", "metadata", "resources", "client"})
#: Top-level modules that belong to a layer although they are not in its package.
MODULE_LAYERS = {"config": "common"}


@dataclass(frozen=True)
class Import:
    """One import statement's target, as found in ``path`` (relative to the tree) at ``line``."""

    path: str
    line: int
    importer: str           # dotted module name of the importing file
    target: str             # dotted module (or module.attribute) name imported
    in_function: bool       # inside a def/lambda (run when called, not at import time)


@dataclass(frozen=True)
class ClassSize:
    path: str
    line: int
    name: str
    lines: int


def module_name(root: str, path: str) -> str:
    """``pulsar_twisted/a/b.py`` -> ``pulsar_twisted.a.b`` (``__init__.py`` names its package)."""
    rel = os.path.relpath(path, root)[:-len(".py")]
    parts = rel.split(os.sep)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str):
    """The layer of a ``pulsar_twisted`` module name, or None for the root package itself and
    for names outside ``pulsar_twisted``."""
    parts = module.split(".")
    if parts[0] != ROOT_PACKAGE or len(parts) < 2:
        return None
    return MODULE_LAYERS.get(parts[1], parts[1])


def python_files(package_dir: str):
    """Every ``.py`` file under ``package_dir``, sorted (generated protobuf modules included)."""
    found = []
    for directory, subdirs, files in os.walk(package_dir):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        found.extend(os.path.join(directory, f) for f in sorted(files) if f.endswith(".py"))
    return found


def _resolve_relative(importer: str, is_package: bool, level: int, module) -> str:
    package = importer.split(".") if is_package else importer.split(".")[:-1]
    if level > 1:
        package = package[:-(level - 1)]
    return ".".join(package + ([module] if module else []))


class _ImportVisitor(ast.NodeVisitor):
    def __init__(self, path, importer, is_package):
        self.path = path
        self.importer = importer
        self.is_package = is_package
        self.depth = 0          # functions (and lambdas) we are inside
        self.found = []

    def _add(self, node, target):
        self.found.append(Import(self.path, node.lineno, self.importer, target, self.depth > 0))

    def _in_function(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _in_function

    def visit_Import(self, node):
        for alias in node.names:
            self._add(node, alias.name)

    def visit_ImportFrom(self, node):
        if node.level:
            base = _resolve_relative(self.importer, self.is_package, node.level, node.module)
        else:
            base = node.module
        for alias in node.names:
            # ``from pkg import name`` imports pkg and, if name is a submodule, pkg.name: record
            # the longer name; the layer is the same unless pkg is the root package.
            self._add(node, base if alias.name == "*" else f"{base}.{alias.name}")

    def visit_Call(self, node):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if (name in ("import_module", "__import__") and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            self._add(node, node.args[0].value)
        self.generic_visit(node)


def parse(path: str):
    with open(path, "rb") as f:
        return ast.parse(f.read(), filename=path)


def imports_in(root: str, path: str):
    """Every import made by the file ``path`` of the tree rooted at ``root``."""
    rel = os.path.relpath(path, root)
    visitor = _ImportVisitor(rel, module_name(root, path), os.path.basename(path) == "__init__.py")
    visitor.visit(parse(path))
    return visitor.found


def all_imports(root: str):
    """Every import of every file under ``root/pulsar_twisted``, of our own modules only."""
    found = []
    for path in python_files(os.path.join(root, ROOT_PACKAGE)):
        found.extend(i for i in imports_in(root, path)
                     if i.target == ROOT_PACKAGE or i.target.startswith(ROOT_PACKAGE + "."))
    return found


def allowed(source: str, target: str) -> bool:
    """May layer ``source`` import layer ``target``? (module docstring)."""
    if source == target:
        return True
    if target == "testing":
        return False
    if source == "testing":
        return target != "daemons"
    if source == "client":
        return target in CLIENT_MAY_IMPORT
    if source == "functions":
        return target in FUNCTIONS_MAY_IMPORT
    if target == "client":
        return source in CLIENT_IMPORTED_BY
    if source not in RANKS or target not in RANKS:
        return False        # a subpackage the layering does not know: place it first
    return RANKS[target] < RANKS[source]


def violations(root: str):
    """The imports that break the layering, in file and line order."""
    out = []
    for imp in all_imports(root):
        source, target = layer_of(imp.importer), layer_of(imp.target)
        if source is None or target is None:
            continue
        if not allowed(source, target):
            out.append(imp)
    return out


def describe(imp: Import) -> str:
    where = "in a function" if imp.in_function else "module level"
    return (f"{imp.path}:{imp.line}: {layer_of(imp.importer)} -> {layer_of(imp.target)} "
            f"({imp.importer} imports {imp.target}, {where})")


def layer_graph(imports):
    """Layer -> set of other layers it imports."""
    graph = {}
    for imp in imports:
        source, target = layer_of(imp.importer), layer_of(imp.target)
        if source is None or target is None:
            continue
        graph.setdefault(source, set())
        graph.setdefault(target, set())
        if source != target:
            graph[source].add(target)
    return graph


def strongly_connected(graph):
    """Tarjan's algorithm: the components of ``graph`` (node -> successors), each sorted."""
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def class_sizes(root: str, under: str = ROOT_PACKAGE):
    """Every class under ``root/under`` with its length in lines (decorators excluded)."""
    out = []
    for path in python_files(os.path.join(root, under)):
        rel = os.path.relpath(path, root)
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ClassDef):
                out.append(ClassSize(rel, node.lineno, node.name, node.end_lineno - node.lineno + 1))
    return out


def string_spellings(root: str, needle: str):
    """(path, line) of every string constant (docstrings excluded) containing ``needle``."""
    out = []
    for path in python_files(os.path.join(root, ROOT_PACKAGE)):
        tree = parse(path)
        docstrings = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    docstrings.add(id(body[0].value))
        rel = os.path.relpath(path, root)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and needle in node.value and id(node) not in docstrings):
                out.append((rel, node.lineno))
    return sorted(out)
