"""The migrations sit beside the database layer: their scripts read the tables of
``service.db.models``, and the service reaches them through ``service.db.schema`` alone,
so the arrow between the two packages runs one way (the user package and the benchmarks
go through the same module)."""

from __future__ import annotations

from pathlib import Path

from module_imports import imported_modules

ROOT = Path(__file__).resolve().parents[2]
#: The one module that imports ``migrations``.
GATE = Path("service/db/schema.py")


def _imports_migrations(path: Path) -> bool:
    return any(name.split(".")[0] == "migrations" for name in imported_modules(path))


def test_only_the_schema_module_imports_the_migrations() -> None:
    files = [p for package in ("service", "pipetune", "bench", "workers", "codegen",
                               "scheduler_search")
             for p in sorted((ROOT / package).rglob("*.py"))]
    assert len(files) > 100
    importers = {p.relative_to(ROOT) for p in files if _imports_migrations(p)}
    assert importers == {GATE}
