"""pipetune's child processes, started so that the caller's script is never imported.

multiprocessing's spawn method starts a child that imports the parent's ``__main__``
again (as ``__mp_main__``) before it runs its target. A user's script without an
``if __name__ == "__main__":`` guard that calls ``pipetune.tune`` on a GPU then ran its
whole body again in every child, each failing with spawn's bootstrapping
``RuntimeError`` (issue 42). A :class:`Child` is a fresh interpreter running
``python -m workers._child``: its ``__main__`` is pipetune's own, and it imports only
the target's module. Parent and child speak over a socket pair as a ``multiprocessing``
pipe does (``Connection``: pickled messages, ``poll`` with a timeout): the child's end
is handed over as an inherited file descriptor; the parent's ``sys.path`` comes first,
then the target and its arguments, pickled by reference. The target is called as
``target(conn, *args)`` with the child's end of the pipe.

Like a daemonic ``multiprocessing.Process``, a child still alive when the parent
interpreter exits is killed.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import subprocess
import sys
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

#: Children alive in this process, killed at exit (multiprocessing's daemon semantics).
_LIVE: weakref.WeakSet[Child] = weakref.WeakSet()


class Child:
    """One child process running ``target(conn, *args)``; ``conn`` is the parent's end.

    The methods are those of ``multiprocessing.Process`` that pipetune uses.

    Args:
        target: a module-level function (pickled by reference; not one of ``__main__``).
        args: its arguments after the child's end of the pipe (picklable).
        name: shown on the child's command line, so that ``ps`` tells the children apart.
    """

    def __init__(self, target: Callable[..., Any], args: tuple[Any, ...] = (), *,
                 name: str = "pipetune-child") -> None:
        ours, theirs = socket.socketpair()
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-m", "workers._child", str(theirs.fileno()), name],
                pass_fds=(theirs.fileno(),), env=_child_env(),
                stdin=subprocess.DEVNULL)  # as multiprocessing's children: no terminal input
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.conn.send(list(sys.path))
        self.conn.send((target, args))
        _LIVE.add(self)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def exitcode(self) -> int | None:
        """The exit code once it has ended (negative: the signal that ended it), else None."""
        return self._popen.poll()

    def is_alive(self) -> bool:
        return self._popen.poll() is None

    def join(self, timeout: float | None = None) -> None:
        """Wait for the child to end, at most ``timeout`` seconds."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout)

    def terminate(self) -> None:
        if self.is_alive():
            self._popen.terminate()

    def kill(self) -> None:
        if self.is_alive():
            self._popen.kill()

    def close(self) -> None:
        """Close the parent's end of the pipe (the child sees EOF)."""
        self.conn.close()


def _child_env() -> dict[str, str]:
    """The parent's environment, with the folder holding this package first on the path,
    so that ``-m workers._child`` finds the same pipetune whatever the working directory."""
    root = str(Path(__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}


@atexit.register
def _kill_live_children() -> None:
    for child in list(_LIVE):
        child.kill()
        child.join(5)
