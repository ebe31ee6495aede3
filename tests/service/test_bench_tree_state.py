"""``bench/common.py``'s record of the code a benchmark ran: a hash of the code folders'
files as they are on disk, tracked or not, that changes with any of them."""

from __future__ import annotations

import subprocess
from pathlib import Path

from service_helpers import bench_module


def _repo(root: Path) -> None:
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "codegen").mkdir()
    (root / "codegen" / "a.py").write_text("x = 1\n")
    (root / ".gitignore").write_text("codegen/ignored.py\n")
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)


def test_the_source_hash_follows_the_files_on_disk(tmp_path: Path) -> None:
    common = bench_module("common")
    _repo(tmp_path)
    first = common.source_sha256(tmp_path)
    assert first == common.source_sha256(tmp_path)
    (tmp_path / "codegen" / "ignored.py").write_text("y = 2\n")
    assert common.source_sha256(tmp_path) == first  # ignored files do not count
    (tmp_path / "codegen" / "new.py").write_text("z = 3\n")  # untracked: as on a GPU copy
    second = common.source_sha256(tmp_path)
    assert second != first
    (tmp_path / "codegen" / "a.py").write_text("x = 2\n")
    third = common.source_sha256(tmp_path)
    assert third not in (first, second)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.md").write_text("prose\n")  # outside the code folders
    assert common.source_sha256(tmp_path) == third
