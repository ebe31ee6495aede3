"""Small parts: in the packages a newcomer reads first (code generation, the search loops,
the run manager) no function runs over 100 lines and no class over 400, so each has one
job and fits in a reader's head. A part that grows past them is split by what it does
(the pipeline skeleton by role, the range search's refining into its own planner)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("codegen", "scheduler_search/search", "service/runs")
FUNCTION_LINES_MAX = 100
CLASS_LINES_MAX = 400


def _oversized(path: Path) -> list[str]:
    """``path``'s functions and classes over their limits, as ``name: lines``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        lines = getattr(node, "end_lineno", 0) - getattr(node, "lineno", 0) + 1
        if isinstance(node, ast.ClassDef) and lines > CLASS_LINES_MAX:
            found.append(f"class {node.name}: {lines}")
        elif (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
              and lines > FUNCTION_LINES_MAX):
            found.append(f"def {node.name}: {lines}")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_over_100_lines_and_no_class_over_400(package: str) -> None:
    oversized = {path.relative_to(ROOT).as_posix(): found
                 for path in sorted((ROOT / package).rglob("*.py"))
                 if (found := _oversized(path))}
    assert oversized == {}


def test_the_measure_counts_a_class_from_its_line_to_its_last(tmp_path: Path) -> None:
    module = tmp_path / "big.py"
    module.write_text("class Big:\n" + "    x = 1\n" * CLASS_LINES_MAX
                      + "def long():\n" + "    pass\n" * FUNCTION_LINES_MAX)
    assert _oversized(module) == [f"class Big: {CLASS_LINES_MAX + 1}",
                                  f"def long: {FUNCTION_LINES_MAX + 1}"]
