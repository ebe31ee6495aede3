"""Snippets: named pieces of CUDA C++ (one inline function per PTX instruction) and the
prelude builder that emits only the snippets a kernel uses, with their dependencies.

Every primitive family module (``mbarrier``, ``tma``, ``fences``, ...) registers its
snippets here at import. A snippet is emitted once, after the snippets it requires, in a
stable order, so the same set of names always gives byte-identical text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Registered snippets by name, in registration order (which is the emission order).
_REGISTRY: dict[str, Snippet] = {}
#: Each registered snippet's place in a prelude: its family's rank, then registration.
_PLACES: dict[str, tuple[int, int]] = {}


@dataclass(frozen=True)
class Snippet:
    """One device-side definition.

    Args:
        name: the function (or type) it defines; kernels name it in ``use``.
        code: the C++ text, ending with a newline.
        requires: snippets that must come before it.
        section: where the PTX ISA (or CUDA guide) documents the instruction.
    """

    name: str
    code: str
    requires: tuple[str, ...] = ()
    section: str = ""

    def text(self) -> str:
        head = f"// {self.name}: PTX ISA, {self.section}\n" if self.section else ""
        return head + self.code


def register(*snippets: Snippet, rank: int) -> None:
    """Add ``snippets`` to the registry (a name may be registered once). ``rank`` places
    the family in every prelude: families by rank, a family's snippets in the order
    given, whatever order their modules are imported in (so a family can move to another
    package without changing any kernel's text)."""
    for snippet in snippets:
        if snippet.name in _REGISTRY and _REGISTRY[snippet.name] != snippet:
            raise ValueError(f"snippet {snippet.name!r} registered twice with different code")
        _REGISTRY[snippet.name] = snippet
        _PLACES.setdefault(snippet.name, (rank, len(_PLACES)))


def snippet(name: str) -> Snippet:
    """The registered snippet ``name``; ``KeyError`` lists what exists."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"no device primitive {name!r}; known: {', '.join(_REGISTRY)}") from None


def prelude_rank(name: str) -> int:
    """The rank of registered snippet ``name``'s family (:func:`register`)."""
    return _PLACES[name][0]


def registered() -> tuple[str, ...]:
    """Every registered snippet's name, in prelude order."""
    return tuple(sorted(_REGISTRY, key=_PLACES.__getitem__))


def prelude(uses: Iterable[str | Snippet],
            variants: Mapping[str, Snippet] | None = None) -> str:
    """The text of every snippet in ``uses`` and of what they require, each once.

    Registered snippets come in prelude order (:func:`register`); generated ones
    (``Snippet`` objects, e.g. one MMA variant) after them, in the order given.
    ``variants`` replace registered snippets of the same name (one architecture's text of
    a primitive the kernels call by its neutral name), in the registered one's place; a
    snippet comes after everything it requires.
    """
    variants = variants or {}
    generated: dict[str, Snippet] = {}
    wanted: set[str] = set()

    def want(name: str) -> None:
        if name in wanted:
            return
        wanted.add(name)
        item = generated.get(name) or variants.get(name) or snippet(name)
        for dependency in item.requires:
            want(dependency)

    for use in uses:
        if isinstance(use, Snippet):
            generated.setdefault(use.name, use)
            want(use.name)
        else:
            want(use)
    ordered: dict[str, Snippet] = {}

    def place(name: str) -> None:
        """``name`` after what it requires (a variant may require what only it uses)."""
        if name in ordered:
            return
        item = generated.get(name) or variants.get(name) or snippet(name)
        for dependency in item.requires:
            place(dependency)
        ordered[name] = item

    for name in registered():
        if name in wanted:
            place(name)
    for name in generated:
        place(name)
    return "\n".join(s.text() for s in ordered.values())
