"""FlashAttention-4 (the ``flash-attn-4`` wheel, CuTe DSL kernels) for the attention bench's
optional peer, on a GPU machine with no internet and a 64 MiB carry per call.

``fetch`` (here, with the package index): downloads the pinned cp312 wheels into ``--dir``
(git-ignored, never committed) and cuts them into carries of at most ``--carry-mib`` each
(the checkout travels with each, within the call's 64 MiB):
``<dir>/carry0``, ``<dir>/carry1``, ... (the CUDA 13 library wheel alone is 92 MB, so it
travels in parts). ``install`` (on the GPU machine, once per carry, in order): moves the
carry's files into ``--stash`` (a folder outside the checkout that a warm machine keeps
between calls), and once every part of every wheel is there, joins them and installs the
wheels into ``--target``; put that folder on ``PYTHONPATH`` and ``bench/attention.py run``
times ``flash_attn.cute.flash_attn_func`` beside cuDNN and FlashAttention-2.

    python bench/fa4_wheels.py fetch --dir .peers/fa4
    # GPU, carry [".peers/fa4/carry0"], then carry1, ...:
    python3 bench/fa4_wheels.py install --carry .peers/fa4/carry0 --stash /tmp/fa4-parts \
        --target /tmp/fa4-site
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

#: The forward's wheel and what it imports, pinned (CUDA 13 libraries: the H200 machine's
#: toolkit); versions as fetched on 2026-12-05.
WHEELS = (
    "flash-attn-4==4.0.0b40",
    "nvidia-cutlass-dsl==4.8.1",
    "nvidia-cutlass-dsl-libs-base==4.8.1",
    "nvidia-cutlass-dsl-libs-cu13==4.8.1",
    "apache-tvm-ffi==0.1.15.post2",
    "torch-c-dlpack-ext==0.1.5",
    "quack-kernels==0.6.5",
    "einops==0.9.0.dev0",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
#: What ``fetch`` leaves beside the carries: every file's parts, to join on the GPU side.
MANIFEST = "manifest.json"
MIB = 1 << 20


def fetch(folder: Path, carry_mib: int) -> None:
    downloads = folder / "wheels"
    downloads.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--pre",
                    "--only-binary=:all:", "--python-version", "3.12", "--implementation",
                    "cp", *platforms, "--platform", "any", "-d", str(downloads), *WHEELS],
                   check=True)
    pieces = []  # (size, wheel, part name)
    manifest: dict[str, list[str]] = {}
    limit = carry_mib * MIB
    for wheel in sorted(downloads.glob("*.whl")):
        data = wheel.read_bytes()
        parts = [data[i:i + limit] for i in range(0, len(data), limit)] or [b""]
        manifest[wheel.name] = [f"{wheel.name}.part{i}" for i in range(len(parts))]
        pieces += [(part, name) for part, name in zip(parts, manifest[wheel.name], strict=True)]
    carries: list[list[tuple[bytes, str]]] = []
    for part, name in sorted(pieces, key=lambda p: -len(p[0])):  # first fit, largest first
        home = next((c for c in carries if sum(len(p) for p, _ in c) + len(part) <= limit), None)
        if home is None:
            carries.append(home := [])
        home.append((part, name))
    for index, carry in enumerate(carries):
        target = folder / f"carry{index}"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        for part, name in carry:
            (target / name).write_bytes(part)
        (target / MANIFEST).write_text(json.dumps(manifest, indent=1))
        print(f"{target}: {sum(len(p) for p, _ in carry) / MIB:.1f} MiB, {len(carry)} part(s)")


def install(carry: Path, stash: Path, target: Path) -> None:
    stash.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((carry / MANIFEST).read_text())
    for part in carry.iterdir():
        if part.name != MANIFEST:
            shutil.copy(part, stash / part.name)
    missing = [p for parts in manifest.values() for p in parts if not (stash / p).exists()]
    if missing:
        print(f"waiting for {len(missing)} more part(s): {missing[:3]}")
        return
    wheels = []
    for wheel, parts in manifest.items():
        joined = stash / wheel
        joined.write_bytes(b"".join((stash / p).read_bytes() for p in parts))
        wheels.append(str(joined))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps",
                    "--no-compile", "--upgrade", "--target", str(target), *wheels], check=True)
    print(f"installed {len(wheels)} wheels into {target}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    get = commands.add_parser("fetch", help="download and cut into carries (CPU machine)")
    get.add_argument("--dir", type=Path, default=Path(".peers/fa4"))
    # A call carries the checkout too (29 MB of tracked files on 2026-12-05): 64 MiB in all.
    get.add_argument("--carry-mib", type=int, default=32)
    put = commands.add_parser("install", help="one carry's parts; install once all are in")
    put.add_argument("--carry", type=Path, required=True)
    put.add_argument("--stash", type=Path, default=Path("/tmp/fa4-parts"))
    put.add_argument("--target", type=Path, default=Path("/tmp/fa4-site"))
    args = parser.parse_args()
    if args.command == "fetch":
        fetch(args.dir, args.carry_mib)
    else:
        install(args.carry, args.stash, args.target)


if __name__ == "__main__":
    main()
