"""What a source file imports, read from its syntax tree (absolute imports only): for the
tests that check which package may import which."""

from __future__ import annotations

import ast
from pathlib import Path


def imported_modules(path: Path) -> set[str]:
    """The modules ``path`` imports by absolute name (``import a.b``, ``from a.b import c``
    both give ``a.b``), at any depth of the file (function-level imports too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names
