"""A kernel as plain CUDA C++, for projects without Python.

:func:`export_files` writes, from a :class:`~codegen.artifact.KernelArtifact`:

- ``kernel.cu``: the generated kernel, as tuned;
- ``<name>.h``: one host function, ``cudaError_t <name>(<tensors>, cudaStream_t)``, taking
  the operator's tensors as device pointers in contract order;
- ``launch.cu``: that function: the TMA descriptors encoded with the driver API's
  ``cuTensorMapEncodeTiled`` over the given pointers, the kernel's workspaces allocated
  and zeroed by the first call on each device (kept for the process), the dynamic shared
  memory raised, the launch on the stream;
- ``example.cu`` and ``BUILD.txt``: a caller (inputs from raw files, outputs written back)
  and the nvcc line that builds it.
"""

from __future__ import annotations

from dataclasses import replace

from codegen.artifact import (
    TENSOR_MAP_DATA_TYPES,
    TENSOR_MAP_OOB_FILLS,
    TENSOR_MAP_SWIZZLES,
    KernelArtifact,
    ScalarArg,
    TensorArg,
    TensorMapArg,
    WorkspaceArg,
)
from codegen.targets import Target, target_of_kernel
from codegen.targets.ampere.copies import COPY_MAP_RANK
from scheduler_search.ops import DTYPE_BYTES, parse_spec

#: C element type of a tensor pointer, as the generated kernels declare them.
_C_TYPES = {"float16": "unsigned short", "bfloat16": "unsigned short", "float32": "float",
            "float8_e4m3": "unsigned char", "float8_e5m2": "unsigned char", "int32": "int"}
#: Devices a process's workspaces are kept for (CUDA device ordinals below this).
MAX_DEVICES = 16


def kernel_target(artifact: KernelArtifact) -> Target:
    """The target ``artifact`` was built for, read off its ``-arch`` compile option.

    Raises:
        ValueError: the artifact names no architecture, or one without a target.
    """
    try:
        return target_of_kernel(artifact.compile_options, artifact.extra)
    except ValueError as error:
        raise ValueError(f"kernel {artifact.entry}: {error}") from None


def build_target(artifact: KernelArtifact) -> Target:
    """The target whose build the export takes: the kernel's own, compiled for the
    architecture its options name (a newer GPU's, where the code is an older one's)."""
    target = kernel_target(artifact)
    arch = next((o.split("=", 1)[1] for o in artifact.compile_options
                 if o.startswith("-arch=")), target.arch)
    return target if arch == target.arch else replace(target, arch=arch)


def build_line(artifact: KernelArtifact) -> str:
    """The nvcc command that builds the export of ``artifact`` for its architecture."""
    return build_target(artifact).nvcc_build_line("example", "example.cu", "launch.cu")


def launch_name(artifact: KernelArtifact) -> str:
    return f"pipetune_{artifact.op}_{artifact.schedule_hash[:12]}"


def _tensors(artifact: KernelArtifact) -> dict[str, tuple[str, tuple[int, ...], str]]:
    """Every tensor the kernel touches, by name: (dtype, shape, role), in the operator's
    contract order (the spec's), whatever order the kernel's parameters take them in."""
    dtypes: dict[str, str] = {}
    for arg in artifact.args:
        if isinstance(arg, TensorMapArg):
            dtypes.setdefault(arg.tensor, arg.dtype)
        elif isinstance(arg, TensorArg):
            dtypes[arg.name] = arg.dtype
    return {t.name: (dtypes[t.name], tuple(t.shape), t.role)
            for t in parse_spec(artifact.op, artifact.params).tensors() if t.name in dtypes}


def _signature(artifact: KernelArtifact) -> str:
    params = [f"{'void' if role == 'output' else 'const void'}* {name}"
              for name, (_, _, role) in _tensors(artifact).items()]
    return f"cudaError_t {launch_name(artifact)}({', '.join(params)}, cudaStream_t stream)"


def _header(artifact: KernelArtifact) -> str:
    lines = ["#pragma once", "#include <cuda_runtime.h>", "",
             f"// pipetune kernel: {artifact.op} {artifact.params}",
             f"// schedule {artifact.schedule_hash}", "// tensors (device pointers, row-major,"
             " 16-byte aligned):"]
    for name, (dtype, shape, _) in _tensors(artifact).items():
        lines.append(f"//   {name}: {dtype} {'x'.join(map(str, shape))}")
    for arg in _workspaces(artifact):
        lines += [f"// workspace {arg.name}: {arg.bytes} bytes, allocated and zeroed by the first "
                  "call on each device,", "//   kept for the process; calls that may overlap "
                  "(two streams) share it"]
    lines += [f"{_signature(artifact)};", ""]
    return "\n".join(lines)


def _encode(arg: TensorMapArg) -> list[str]:
    rank = len(arg.global_dims)
    strides = arg.element_strides or (1,) * rank
    def array(kind: str, values: tuple[int, ...]) -> str:
        return f"{{{', '.join(f'({kind}){v}' for v in values)}}}"
    return [
        f"  {{  // {arg.name} over {arg.tensor}",
        f"    const cuuint64_t dims[] = {array('cuuint64_t', arg.global_dims)};",
        f"    const cuuint64_t strides[] = {array('cuuint64_t', arg.global_strides_bytes)};",
        f"    const cuuint32_t box[] = {array('cuuint32_t', arg.box_dims)};",
        f"    const cuuint32_t steps[] = {array('cuuint32_t', strides)};",
        "    CUtensorMap map;",
        f"    if (cuTensorMapEncodeTiled(&map, {TENSOR_MAP_DATA_TYPES[arg.dtype]}, {rank}, "
        f"const_cast<void*>({arg.tensor}), dims, strides, box, steps, "
        f"CU_TENSOR_MAP_INTERLEAVE_NONE, {TENSOR_MAP_SWIZZLES[arg.swizzle]}, "
        f"CU_TENSOR_MAP_L2_PROMOTION_L2_128B, {TENSOR_MAP_OOB_FILLS[arg.oob_fill]}) "
        "!= CUDA_SUCCESS)",
        "      return cudaErrorInvalidValue;",
        f"    std::memcpy(&{arg.name}, &map, sizeof(map));",
        "  }",
    ]


def _fill_copy_map(arg: TensorMapArg) -> list[str]:
    """The copy map of ``arg`` (a target without TMA: the kernel's own struct), field by
    field; dimensions past the tensor's rank are one element."""
    rank = len(arg.global_dims)
    pad = COPY_MAP_RANK + 1 - rank
    dims = (*arg.global_dims, *(1,) * pad)
    box = (*arg.box_dims, *(1,) * pad)
    strides = (*arg.global_strides_bytes, *(0,) * (COPY_MAP_RANK - len(arg.global_strides_bytes)))
    span = 0 if arg.swizzle == "none" else int(arg.swizzle.removesuffix("B"))
    lines = [f"  {{  // {arg.name} over {arg.tensor}",
             f"    {arg.name}.base = reinterpret_cast<unsigned long long>({arg.tensor});"]
    lines += [f"    {arg.name}.strides[{i}] = {v}ull;" for i, v in enumerate(strides)]
    lines += [f"    {arg.name}.dims[{i}] = {v}u;" for i, v in enumerate(dims)]
    lines += [f"    {arg.name}.box[{i}] = {v}u;" for i, v in enumerate(box)]
    elem = DTYPE_BYTES[arg.dtype]
    row_chunks = arg.box_dims[0] * elem // 16
    lines += [f"    {arg.name}.elem_shift = {elem.bit_length() - 1}u;",
              f"    {arg.name}.swizzle_bytes = {span}u;", f"    {arg.name}.rank = {rank}u;",
              f"    {arg.name}.row_shift = {row_chunks.bit_length() - 1}u;", "  }"]
    return lines


def _workspaces(artifact: KernelArtifact) -> list[WorkspaceArg]:
    return [a for a in artifact.args if isinstance(a, WorkspaceArg)]


#: launch.cu's helpers for a kernel with workspaces (written only then).
_WORKSPACE_HELPERS = """
// A workspace's address, passed as whatever pointer type the kernel declares it as.
struct PipetuneWorkspace {
  void* address;
  template <typename T> operator T*() const { return static_cast<T*>(address); }
};

// The workspace in `slot`, allocated and zeroed (on `stream`, so before the launch) unless
// it is already: one per process and device, never freed (the kernel leaves it reusable).
static cudaError_t pipetune_workspace(void*& slot, size_t bytes, cudaStream_t stream) {
  if (slot != nullptr) return cudaSuccess;
  void* fresh = nullptr;
  cudaError_t status = cudaMalloc(&fresh, bytes);
  if (status != cudaSuccess) return status;
  status = cudaMemsetAsync(fresh, 0, bytes, stream);
  if (status != cudaSuccess) {
    cudaFree(fresh);
    return status;
  }
  slot = fresh;
  return cudaSuccess;
}

// Guards the workspaces' first allocation: calls may come from several threads.
static std::mutex pipetune_workspace_mutex;
"""


def _take_workspaces(workspaces: list[WorkspaceArg]) -> list[str]:
    """``PipetuneWorkspace <name>`` for each workspace, the current device's (kept by
    device ordinal, so a call on device ``MAX_DEVICES`` or above fails)."""
    lines = ["  // Workspaces: per process and device, allocated by the first call there.",
             "  int device = 0;",
             "  const cudaError_t got_device = cudaGetDevice(&device);",
             "  if (got_device != cudaSuccess) return got_device;",
             f"  if (device < 0 || device >= {MAX_DEVICES}) return cudaErrorInvalidDevice;"]
    lines += [f"  static void* {w.name}_by_device[{MAX_DEVICES}] = {{}};" for w in workspaces]
    lines += [f"  PipetuneWorkspace {w.name};" for w in workspaces]
    lines += ["  {", "    const std::lock_guard<std::mutex> lock(pipetune_workspace_mutex);"]
    for w in workspaces:
        lines += [f"    const cudaError_t {w.name}_status = pipetune_workspace("
                  f"{w.name}_by_device[device], {w.bytes}ull, stream);",
                  f"    if ({w.name}_status != cudaSuccess) return {w.name}_status;",
                  f"    {w.name}.address = {w.name}_by_device[device];"]
    lines += ["  }"]
    return lines


def _launch(artifact: KernelArtifact) -> str:
    maps = [a for a in artifact.args if isinstance(a, TensorMapArg)]
    workspaces = _workspaces(artifact)
    lines = ['#include <cstring>', *(['#include <mutex>'] if workspaces else []),
             '#include <cuda.h>', '#include "kernel.cu"',
             f'#include "{launch_name(artifact)}.h"',
             *([_WORKSPACE_HELPERS] if workspaces else [""]),
             f"{_signature(artifact)} {{",
             "  static_assert(sizeof(TensorMap) == sizeof(CUtensorMap), \"descriptor size\");"]
    target = kernel_target(artifact)
    tma = target.tensor_map_encoding == "tma"
    lines += [f"  {target.tensor_map_type(m)} {m.name}{'' if tma else '{}'};" for m in maps]
    for m in maps:
        lines += _encode(m) if tma else _fill_copy_map(m)
    if workspaces:
        lines += _take_workspaces(workspaces)
    values = []
    for arg in artifact.args:
        if isinstance(arg, TensorMapArg | WorkspaceArg):
            values.append(arg.name)
        elif isinstance(arg, TensorArg):
            values.append(f"static_cast<{_C_TYPES[arg.dtype]}*>(const_cast<void*>("
                          f"static_cast<const void*>({arg.name})))")
        elif isinstance(arg, ScalarArg):
            values.append(repr(arg.value))
    grid, block = artifact.grid, artifact.block
    lines += [
        f"  const cudaError_t attr = cudaFuncSetAttribute({artifact.entry}, "
        f"cudaFuncAttributeMaxDynamicSharedMemorySize, {artifact.dynamic_smem_bytes});",
        "  if (attr != cudaSuccess) return attr;",
        f"  {artifact.entry}<<<dim3({grid[0]}, {grid[1]}, {grid[2]}), dim3({block[0]}, "
        f"{block[1]}, {block[2]}), {artifact.dynamic_smem_bytes}, stream>>>("
        f"{', '.join(values)});",
        "  return cudaGetLastError();",
        "}", ""]
    return "\n".join(lines)


#: Host conversion of a float in [-1, 1) to each element type, for the example's inputs.
_HOST_FILL = {"float16": "__half_as_ushort(__float2half(v))",
              "bfloat16": "__bfloat16_as_ushort(__float2bfloat16(v))", "float32": "v",
              "float8_e4m3": "__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3)",
              "float8_e5m2": "__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E5M2)"}


def _example(artifact: KernelArtifact) -> str:
    """A caller: ``./example DIR`` reads each input from ``DIR/<name>.bin`` (raw, row-major)
    and writes each output there; ``./example`` fills the inputs with seeded random values
    and prints a checksum of the outputs."""
    tensors = _tensors(artifact)
    lines = ["#include <cstdio>", "#include <cstdlib>", "#include <string>", "#include <vector>",
             "#include <cuda_fp16.h>", "#include <cuda_bf16.h>", "#include <cuda_fp8.h>",
             f'#include "{launch_name(artifact)}.h"', "",
             "static bool read_file(const std::string& path, std::vector<unsigned char>& host) {",
             '  FILE* f = std::fopen(path.c_str(), "rb");',
             "  if (!f) return false;",
             "  const size_t got = std::fread(host.data(), 1, host.size(), f);",
             "  std::fclose(f);",
             "  return got == host.size();",
             "}", "",
             "int main(int argc, char** argv) {",
             '  const std::string dir = argc > 1 ? argv[1] : "";',
             "  unsigned int seed = 1234u;"]
    for name, (dtype, shape, role) in tensors.items():
        count = 1
        for extent in shape:
            count *= extent
        size = count * DTYPE_BYTES[dtype]
        ctype = _C_TYPES[dtype]
        lines += [f"  // {name}: {dtype} {'x'.join(map(str, shape))} ({role})",
                  f"  std::vector<unsigned char> {name}_host({size}ull);",
                  f"  void* {name} = nullptr;",
                  f"  if (cudaMalloc(&{name}, {size}ull) != cudaSuccess) return 2;"]
        if role == "output":
            continue
        lines += [f'  if (!dir.empty() && !read_file(dir + "/{name}.bin", {name}_host)) {{',
                  f'    std::fprintf(stderr, "cannot read %s/{name}.bin ({size} bytes)\\n", '
                  "dir.c_str());",
                  "    return 2;",
                  "  }",
                  "  if (dir.empty()) {",
                  f"    {ctype}* values = reinterpret_cast<{ctype}*>({name}_host.data());",
                  f"    for (size_t i = 0; i < {count}ull; ++i) {{",
                  "      seed = seed * 1664525u + 1013904223u;",
                  "      const float v = (seed >> 8) * (2.0f / 16777216.0f) - 1.0f;",
                  f"      values[i] = {_HOST_FILL[dtype]};",
                  "    }",
                  "  }",
                  f"  cudaMemcpy({name}, {name}_host.data(), {size}ull, "
                  "cudaMemcpyHostToDevice);"]
    call = ", ".join(tensors)
    lines += [f"  const cudaError_t err = {launch_name(artifact)}({call}, 0);",
              "  const cudaError_t done = cudaDeviceSynchronize();",
              '  std::printf("launch: %s, run: %s\\n", cudaGetErrorString(err), '
              "cudaGetErrorString(done));",
              "  if (err != cudaSuccess || done != cudaSuccess) return 1;"]
    for name, (_, _, role) in tensors.items():
        if role != "output":
            continue
        lines += [f"  cudaMemcpy({name}_host.data(), {name}, {name}_host.size(), "
                  "cudaMemcpyDeviceToHost);",
                  "  if (!dir.empty()) {",
                  f'    FILE* f = std::fopen((dir + "/{name}.bin").c_str(), "wb");',
                  f"    if (!f || std::fwrite({name}_host.data(), 1, {name}_host.size(), f) != "
                  f"{name}_host.size()) return 2;",
                  "    std::fclose(f);",
                  "  } else {",
                  "    unsigned long long checksum = 0;",
                  f"    for (unsigned char byte : {name}_host) checksum = checksum * 31 + byte;",
                  f'    std::printf("{name}: checksum %llx\\n", checksum);',
                  "  }"]
    lines += [f"  cudaFree({name});" for name in tensors]
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def export_files(artifact: KernelArtifact) -> dict[str, str]:
    """File name -> text of the standalone export of ``artifact``."""
    name = launch_name(artifact)
    return {
        "kernel.cu": artifact.source,
        f"{name}.h": _header(artifact),
        "launch.cu": _launch(artifact),
        "example.cu": _example(artifact),
        "BUILD.txt": (f"Needs an {build_target(artifact).arch} GPU and the CUDA driver.\n\n"
                      f"    {build_line(artifact)}\n\n"
                      "./example DIR reads each input from DIR/<name>.bin (raw row-major "
                      "elements, the header's shapes)\nand writes each output to "
                      "DIR/<name>.bin; ./example alone runs on seeded random inputs.\n"),
    }
