"""The package arrows of docs/architecture.md: ``scheduler_search`` is the ground floor. It imports
neither ``codegen`` nor ``workers`` nor ``service``, and no GPU, database or web library,
so it can be imported and tested anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

import scheduler_search.space

FORBIDDEN = ("codegen", "workers", "service", "cupy", "cuda", "torch", "sqlalchemy", "alembic",
             "fastapi", "uvicorn", "httpx")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_scheduler_search_imports_nothing_above_it() -> None:
    root = Path(scheduler_search.space.__file__).parents[1]
    files = sorted(root.rglob("*.py"))
    assert len(files) > 20
    offending = {
        str(path.relative_to(root)): sorted(
            name for name in _imports(path) if name.split(".")[0] in FORBIDDEN
        )
        for path in files
    }
    assert {k: v for k, v in offending.items() if v} == {}
