"""The user package calls the service's library modules, never its command-line ones
(``service.commands``: argument parsing and printing), so a change to what a command prints
cannot change what ``pipetune.tune`` returns."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pipetune"


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_the_user_package_imports_no_command_module() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 5
    offending = {str(p.relative_to(PACKAGE)): sorted(n for n in _imported(p)
                                                     if n.startswith("service.commands"))
                 for p in files}
    assert {k: v for k, v in offending.items() if v} == {}
