"""The Ampere-class tile copies run on the host: the kernels' own text of ``copy_box`` and
``tma_load_Nd`` (with ``cp.async`` and the thread index stood in for), over a copy map the
workers pack, typed with the box's geometry as the kernels declare it, must leave shared
memory as TMA would: each box row at its place, 16-byte
chunks XORed by the swizzle, zeros past the tensor's edges (negative coordinates, a
partial last chunk), for 2-, 3- and 4-d boxes. Compiled with the host's C++ compiler."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from codegen.artifact import TensorMapArg
from codegen.cuda import SWIZZLES
from codegen.targets.ampere import copies
from codegen.targets.ampere.target import LOADER_THREADS
from workers.tensor_maps import encode_copy_map

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no host C++ compiler")

HARNESS = r"""
#include <cstdio>
#include <cstring>
typedef unsigned int u32;
typedef unsigned long long u64;
#define __device__
#define __forceinline__ inline
static struct { u32 x; } threadIdx;
static unsigned char smem[1 << 20];
static u32 min(u32 a, u32 b) { return a < b ? a : b; }
// cp.async's stand-in: src_bytes read, the rest of the 16 zeros.
static void cp_async_16(u32 dst, u64 src, u32 src_bytes) {
  std::memcpy(smem + dst, reinterpret_cast<const void*>(src), src_bytes);
  std::memset(smem + dst + src_bytes, 0, 16 - src_bytes);
}
// cp.async with ignore-src: 16 bytes read, or 16 zeros (src not read).
static void cp_async_16_unless(u32 dst, u64 src, bool zeros) {
  if (zeros) std::memset(smem + dst, 0, 16);
  else std::memcpy(smem + dst, reinterpret_cast<const void*>(src), 16);
}
%(copies)s
int main(int argc, char** argv) {
  static unsigned char data[1 << 22];
  %(map_type)s map;
  FILE* f = std::fopen(argv[1], "rb");
  if (std::fread(&map, 1, sizeof(map), f) != sizeof(map)) return 2;
  size_t n = std::fread(data, 1, sizeof(data), f);
  std::fclose(f);
  (void)n;
  map.base = reinterpret_cast<u64>(data);
  int c[4];
  for (int d = 0; d < 4; ++d) c[d] = std::atoi(argv[2 + d]);
  std::memset(smem, 0xAB, sizeof(smem));
  for (u32 t = 0; t < LOADERS; ++t) {
    threadIdx.x = t;
    tma_load_%(rank)sd(1024, &map, %(coords)s, 0);
  }
  std::fwrite(smem, 1, 1 << 16, stdout);
  return 0;
}
"""


def _copy(tmp_path: Path, arg: TensorMapArg, data: np.ndarray, coords: tuple[int, ...]) -> bytes:
    variants = copies.variants(LOADER_THREADS)
    text = "\n".join(variants[n].code for n in ("TensorMap", "copy_box",
                                                 f"tma_load_{len(coords)}d"))
    source = tmp_path / "copy.cpp"
    source.write_text(HARNESS % {"copies": text.replace("#include", "// "),
                                 "map_type": copies.map_type(arg), "rank": len(coords),
                                 "coords": ", ".join(f"c[{d}]" for d in range(len(coords)))})
    binary = tmp_path / "copy"
    subprocess.run(["g++", "-O1", "-std=c++17", "-include", "cstdlib", "-o", str(binary),
                    str(source)], check=True, capture_output=True)
    inputs = tmp_path / "inputs.bin"
    inputs.write_bytes(encode_copy_map(arg, 1 << 20).tobytes() + data.tobytes())
    padded = list(coords) + [0] * (4 - len(coords))
    done = subprocess.run([str(binary), str(inputs), *map(str, padded)], check=True,
                          capture_output=True)
    return done.stdout


def _expected(arg: TensorMapArg, data: np.ndarray, coords: tuple[int, ...]) -> bytes:
    """TMA's placement: the box's elements row by row, zeros outside, then swizzled."""
    box = np.zeros(tuple(reversed(arg.box_dims)), dtype=data.dtype)
    for index in np.ndindex(*box.shape):
        at = [c + i for c, i in zip(reversed(coords), index, strict=True)]
        if all(0 <= a < d for a, d in zip(at, reversed(arg.global_dims), strict=True)):
            box[index] = data[tuple(at)]
    logical = box.tobytes()
    out = bytearray(b"\xab" * (1 << 16))
    swizzle = SWIZZLES.get(int(arg.swizzle.removesuffix("B"))) if arg.swizzle != "none" else None
    for offset in range(0, len(logical), 16):
        at = 1024 + offset
        place = swizzle.apply(at) if swizzle else at
        out[place:place + 16] = logical[offset:offset + 16]
    return bytes(out)


def _tensor(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """Distinct values, so a misplaced element shows."""
    return (np.arange(int(np.prod(shape))) % 60000 + 1).astype(dtype).reshape(shape)


@pytest.mark.parametrize(("swizzle", "box0"), [("128B", 64), ("64B", 32), ("32B", 16)])
@pytest.mark.parametrize("coords", [(0, 0), (64, 40), (-16, -3), (200, 90)])
def test_a_2d_box_lands_where_tma_puts_it(tmp_path: Path, swizzle: str, box0: int,
                                          coords: tuple[int, int]) -> None:
    # Rows of 256 elements of which the tensor has 250: a partial chunk at its edge.
    data = _tensor((100, 256), np.uint16)
    arg = TensorMapArg(name="a_map", tensor="a", dtype="float16", global_dims=(250, 100),
                       global_strides_bytes=(512,), box_dims=(box0, 48), swizzle=swizzle)
    got = _copy(tmp_path, arg, data, coords)
    assert got == _expected(arg, data, coords)


@pytest.mark.parametrize(("box", "coords"), [((64, 1, 32, 1), (0, 3, 40, 1)),
                                             ((64, 4, 16, 1), (64, 0, 100, 0)),
                                             ((32, 2, 8, 2), (0, 1, 120, 1)),
                                             ((64, 4, 1, 1), (0, 0, 127, 1)),
                                             ((64, 2, 1, 1), (64, 3, 127, 0)),
                                             ((64, 4, 1, 1), (0, 0, 128, 1))])
def test_a_4d_box_of_heads_and_rows_lands_where_tma_puts_it(
        tmp_path: Path, box: tuple[int, ...], coords: tuple[int, ...]) -> None:
    """(batch, seq, heads, head_dim) q as attention loads it: boxes over rows and heads,
    past the sequence's end at the last one; boxes of one plane (one position's heads),
    which a thread copies as one column of chunks, past the heads' end and the sequence's."""
    data = _tensor((2, 128, 4, 128), np.uint16)
    arg = TensorMapArg(name="q_map", tensor="q", dtype="bfloat16",
                       global_dims=(128, 4, 128, 2),
                       global_strides_bytes=(256, 1024, 131072), box_dims=box,
                       swizzle="128B" if box[0] == 64 else "64B")
    assert _copy(tmp_path, arg, data, coords) == _expected(arg, data, coords)


def test_an_unswizzled_fp32_vector_lands_as_it_is(tmp_path: Path) -> None:
    data = _tensor((6, 300), np.float32)
    arg = TensorMapArg(name="dt_map", tensor="dt", dtype="float32", global_dims=(300, 6),
                       global_strides_bytes=(1200,), box_dims=(256, 1), swizzle="none")
    for coords in ((0, 2), (256, 5)):
        assert _copy(tmp_path, arg, data, coords) == _expected(arg, data, coords)


SWIZZLED_ROW_HARNESS = r"""
#include <cstdio>
typedef unsigned int u32;
#define __device__
#define __forceinline__ inline
%(snippet)s
static u32 absolute(u32 addr, u32 span) {  // the copies' swizzle of an absolute address
  return addr ^ ((addr >> 3) & ((span / 16 - 1) << 4));
}
int main() {
  const u32 spans[] = {32, 64, 128};
  long wrong = 0, checked = 0;
  for (u32 span : spans)
    for (u32 base = 0; base < 4096; base += span)        // tiles on rows, in an atom or not
      for (u32 step = 0; step < span; step += 16)        // a k step's byte in the row
        for (u32 rows = 0; rows < 24; rows += 8)         // whole rows folded into addr
          for (u32 row = 0; row < 40; ++row)
            for (u32 byte = 0; step + byte < span; byte += 16) {
              const u32 addr = base + rows * span + step;
              ++checked;
              wrong += swizzled_row(addr, row, byte, span) !=
                       absolute(addr + row * span + byte, span);
            }
  std::printf("%%ld %%ld\n", checked, wrong);
  return 0;
}
"""


def test_swizzled_row_is_the_copies_swizzle_of_the_absolute_address(tmp_path: Path) -> None:
    """The ldmatrix lanes' address, taken apart into the tile's atom and the lane's row and
    byte, is the one the copies wrote: the XOR of the absolute address, for tiles starting on
    a row anywhere in an atom, k steps inside a row and whole rows folded into the tile's
    address."""
    from codegen.targets.ampere import mma_sync

    source = tmp_path / "swizzle.cpp"
    source.write_text(SWIZZLED_ROW_HARNESS % {"snippet": mma_sync.SWIZZLED_ROW.code})
    binary = tmp_path / "swizzle"
    subprocess.run(["g++", "-O1", "-std=c++17", "-o", str(binary), str(source)], check=True,
                   capture_output=True)
    checked, wrong = map(int, subprocess.run([str(binary)], check=True, capture_output=True,
                                             text=True).stdout.split())
    assert checked > 100_000 and wrong == 0
