"""The test suite collects the same whichever folders a command names."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_no_test_module_imports_a_conftest_by_name() -> None:
    """Every folder's conftest is the module ``conftest`` to an import, so which one
    ``from conftest import ...`` finds depends on which folders were collected first
    (``pytest tests/service tests/dashboard`` found the dashboard's: 2 collection
    errors). Shared helpers live in modules of their own names."""
    importing = [path.relative_to(TESTS).as_posix() for path in TESTS.rglob("*.py")
                 if re.search(r"^\s*(from conftest import|import conftest)",
                              path.read_text(), re.M)]
    assert importing == []
