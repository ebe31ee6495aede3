"""``pipetune export HASH --out DIR [--database-url URL]``.

Writes a cached kernel (by its hash, as ``pipetune tune`` prints it) as plain CUDA C++: the
kernel, a header with one host launch function, its implementation (TMA descriptors
encoded with the CUDA driver API), an example and its nvcc line, so a C++ project uses the
kernel without Python (``codegen/export.py``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="write a cached kernel as plain CUDA C++ with a launch function",
        description=__doc__, epilog="Example: `pipetune export 4e2c7ea1... --out attn/`.")
    parser.add_argument("kernel_hash", help="the kernel's sha256 (hex)")
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--database-url", default=None, help="SQLAlchemy URL")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, extra: list[str], parser: argparse.ArgumentParser) -> int:
    from codegen.artifact import KernelArtifact
    from codegen.export import BUILD_LINE, export_files
    from service.core.config import get_settings
    from service.core.db import Database
    from service.db import repositories as repo

    if extra:
        parser.error(f"unexpected arguments: {' '.join(extra)}")
    db = Database(get_settings(database_url=args.database_url).database_url)
    try:
        with repo.session_scope(db.sessions) as session:
            row = repo.get_kernel(session, kernel_hash=args.kernel_hash)
            artifact = dict(row.artifact) if row is not None else None
    finally:
        db.dispose()
    if artifact is None:
        print(f"pipetune export: no kernel {args.kernel_hash} in the cache (only runs on a "
              "GPU store kernels)", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in export_files(KernelArtifact.from_dict(artifact)).items():
        (args.out / name).write_text(text)
    print(f"wrote {args.out}/ (build: cd {args.out} && {BUILD_LINE})")
    return 0
