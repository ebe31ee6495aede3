"""Code generation's modules import each other without a cycle: each part (the skeleton, a
role's writer, an operator's hooks, a device primitive) stands on the ones below it, so a
newcomer can read them bottom up. Imports under ``if TYPE_CHECKING:`` are for type hints
and run no code, so they do not count; every other import does, at any depth of the file."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "codegen"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _runtime_imports(tree: ast.AST, modules: set[str]) -> set[str]:
    """The package's modules ``tree`` imports when it runs (``from a import b``: ``a.b``
    where that is a module, else ``a``)."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in modules else node.module)
        stack.extend(ast.iter_child_nodes(node))
    return found & modules


def _graph() -> dict[str, set[str]]:
    paths = sorted((ROOT / PACKAGE).rglob("*.py"))
    modules = {_module_name(p) for p in paths}
    return {_module_name(p): _runtime_imports(ast.parse(p.read_text()), modules) - {_module_name(p)}
            for p in paths}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (a path back to its start), or None: a depth-first walk that
    meets a module still on its path."""
    on_path: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> list[str] | None:
        on_path.append(module)
        for imported in sorted(graph.get(module, ())):
            if imported in on_path:
                return [*on_path[on_path.index(imported):], imported]
            if imported not in done and (found := visit(imported)):
                return found
        done.add(on_path.pop())
        return None

    for start in sorted(graph):
        if start not in done and (found := visit(start)):
            return found
    return None


def test_codegen_has_no_import_cycle() -> None:
    graph = _graph()
    assert graph.get("codegen.pipeline.skeleton")
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
