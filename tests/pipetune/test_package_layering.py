"""The user package calls the service's library modules, never its command-line ones
(``service.commands``: argument parsing and printing), so a change to what a command prints
cannot change what ``pipetune.tune`` returns."""

from __future__ import annotations

from pathlib import Path

from module_imports import imported_modules

PACKAGE = Path(__file__).resolve().parents[2] / "pipetune"


def test_the_user_package_imports_no_command_module() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 5
    offending = {str(p.relative_to(PACKAGE)): sorted(n for n in imported_modules(p)
                                                     if n.startswith("service.commands"))
                 for p in files}
    assert {k: v for k, v in offending.items() if v} == {}
