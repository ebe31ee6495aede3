"""The entry of a ``workers.spawn.Child``: ``python -m workers._child FD NAME``.

Nothing imports this module; as ``__main__`` it reads, from the pipe inherited as file
descriptor ``FD``, the parent's ``sys.path`` and then the target and its arguments, and
calls ``target(conn, *args)``. The caller's script is never imported. ``NAME`` is only
there for ``ps``.
"""

from __future__ import annotations

import sys
from multiprocessing.connection import Connection


def main(fd: int) -> None:
    """The child's side: the parent's ``sys.path``, then its target, then run it."""
    conn = Connection(fd)
    sys.path[:] = conn.recv()
    target, args = conn.recv()
    target(conn, *args)


if __name__ == "__main__":
    main(int(sys.argv[1]))
