"""The package arrows of docs/architecture.md: ``scheduler_search`` is the ground floor. It imports
neither ``codegen`` nor ``workers`` nor ``service``, and no GPU, database or web library,
so it can be imported and tested anywhere."""

from __future__ import annotations

from pathlib import Path

from module_imports import imported_modules

import scheduler_search.space

FORBIDDEN = ("codegen", "workers", "service", "cupy", "cuda", "torch", "sqlalchemy", "alembic",
             "fastapi", "uvicorn", "httpx")


def test_scheduler_search_imports_nothing_above_it() -> None:
    root = Path(scheduler_search.space.__file__).parents[1]
    files = sorted(root.rglob("*.py"))
    assert len(files) > 20
    offending = {
        str(path.relative_to(root)): sorted(
            name for name in imported_modules(path) if name.split(".")[0] in FORBIDDEN
        )
        for path in files
    }
    assert {k: v for k, v in offending.items() if v} == {}
