"""A small line builder for generated C++: indentation by block depth, and the set of
device primitives the text calls (so the prelude holds only those)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from codegen.cuda import Snippet

_INDENT = "  "


class Code:
    """Lines of C++ with block indentation; ``call`` records the primitive it names."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0
        self.uses: list[str | Snippet] = []

    def use(self, *names: str | Snippet) -> None:
        for name in names:
            if name not in self.uses:
                self.uses.append(name)

    def call(self, name: str | Snippet, *args: object, template: str = "") -> str:
        """``name(args...)`` as text (``name<template>(args...)`` with template arguments);
        ``name`` (without template arguments) joins the prelude."""
        self.use(name if isinstance(name, Snippet) else name.split("<")[0])
        label = name.name if isinstance(name, Snippet) else name
        label += f"<{template}>" if template else ""
        return f"{label}({', '.join(str(a) for a in args)})"

    def __call__(self, *lines: str) -> None:
        for line in lines:
            self.lines.append(f"{_INDENT * self.depth}{line}" if line else "")

    def comment(self, text: str) -> None:
        self(f"// {text}")

    @contextmanager
    def block(self, head: str, tail: str = "}") -> Iterator[None]:
        self(f"{head} {{" if head else "{")
        self.depth += 1
        try:
            yield
        finally:
            self.depth -= 1
            self(tail)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"
