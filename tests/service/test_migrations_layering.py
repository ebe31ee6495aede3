"""The migrations sit beside the database layer: their scripts read the tables of
``service.db.models``, and the service reaches them through ``service.db.schema`` alone,
so the arrow between the two packages runs one way (the user package and the benchmarks
go through the same module)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The one module that imports ``migrations``.
GATE = Path("service/db/schema.py")


def _imports_migrations(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(
                alias.name.split(".")[0] == "migrations" for alias in node.names):
            return True
        if (isinstance(node, ast.ImportFrom) and not node.level and node.module
                and node.module.split(".")[0] == "migrations"):
            return True
    return False


def test_only_the_schema_module_imports_the_migrations() -> None:
    files = [p for package in ("service", "pipetune", "bench", "workers", "codegen",
                               "scheduler_search")
             for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 100
    importers = {p.relative_to(ROOT) for p in files if _imports_migrations(p)}
    assert importers == {GATE}
