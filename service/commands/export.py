"""``pipetune export HASH --out DIR [--database-url URL]``.

Writes a cached kernel (by its hash as ``pipetune tune`` prints it, or its first characters
as ``pipetune schedules`` and the dashboard print them) as plain CUDA C++: the
kernel, a header with one host launch function, its implementation (TMA descriptors
encoded with the CUDA driver API), an example and its nvcc line, so a C++ project uses the
kernel without Python (``codegen/export.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from service.db.models import KernelModel


#: The shortest hash prefix taken (the CLI and the dashboard print 12 characters).
MIN_PREFIX = 6


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="write a cached kernel as plain CUDA C++ with a launch function",
        description=__doc__, epilog="Example: `pipetune export 4e2c7ea1b0d9 --out attn/`.")
    parser.add_argument("kernel_hash", help="the kernel's sha256 (hex), or its first "
                        f"characters (at least {MIN_PREFIX}) as pipetune schedules prints them")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--database-url", default=None, help="SQLAlchemy URL")
    parser.set_defaults(handler=run)


def find_kernel(session: Session, prefix: str) -> KernelModel:
    """The one kernel whose hash starts with ``prefix``.

    Raises:
        LookupError: saying why there is none: not a hash, no such kernel, or several
            (the prefix is too short).
    """
    from sqlalchemy import select

    from service.db.models import KernelModel

    prefix = prefix.strip().lower()
    if len(prefix) < MIN_PREFIX or any(c not in "0123456789abcdef" for c in prefix):
        raise LookupError(f"{prefix!r} is not a kernel hash (hex, at least {MIN_PREFIX} "
                          "characters)")
    rows = session.scalars(select(KernelModel).where(KernelModel.hash.startswith(prefix))
                           .order_by(KernelModel.hash).limit(2)).all()
    if not rows:
        raise LookupError(f"no kernel {prefix} in the cache (pipetune schedules lists the "
                          "cached kernels)")
    if len(rows) > 1:
        raise LookupError(f"{prefix} names several kernels ({rows[0].hash[:16]}..., "
                          f"{rows[1].hash[:16]}...); give more of the hash")
    return rows[0]


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    from codegen.artifact import KernelArtifact
    from codegen.export import build_line, export_files
    from service.commands._database import open_database
    from service.db import repositories as repo

    if extra:
        parser.error(f"unexpected arguments: {' '.join(extra)}")
    try:
        with (open_database(args.database_url) as db,
              repo.session_scope(db.read_sessions) as session):
            row = find_kernel(session, args.kernel_hash)
            kernel_hash, artifact = row.hash, dict(row.artifact)
    except LookupError as error:
        print(f"pipetune export: {error}", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    kernel = KernelArtifact.from_dict(artifact)
    for name, text in export_files(kernel).items():
        (args.out / name).write_text(text)
    print(f"wrote kernel {kernel_hash[:16]}... to {args.out}/ "
          f"(build: cd {args.out} && {build_line(kernel)})")
    return 0
