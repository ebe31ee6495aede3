"""A kernel exported as plain CUDA C++: the kernel, a header with one launch function over
the operator's tensors in contract order, its implementation (TMA descriptors from the
artifact's tensor maps, workspaces allocated by the first call), an example; launch.cu and
example.cu compile and link with nvcc."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from codegen import render
from codegen.artifact import KernelArtifact, ScalarArg, TensorArg, WorkspaceArg
from codegen.export import build_target, export_files, launch_name
from codegen.nvcc import nvcc_path
from codegen.targets import HOPPER
from scheduler_search.hardware import get_device, running_code_of
from scheduler_search.ops import parse_spec
from scheduler_search.space.designs import (
    FLASH_ATTENTION_3,
    GEMM_WARP_SPECIALIZED,
    MAMBA2_CHUNK_SCAN,
)
from scheduler_search.sprogram.plan import plan_sprogram

DEVICE = get_device("h200")
#: A producer warpgroup of cp.async copies over two mma.sync consumer warpgroups.
AMPERE_GEMM = {"tile_m": 128, "tile_n": 128, "tile_k": 32, "stages_ab": 4,
               "warp_specialized": True, "consumer_warpgroups": 2, "order": "serial"}
MAMBA2_PARAMS = {"batch": 2, "seqlen": 512, "nheads": 8, "headdim": 64, "dstate": 128,
                 "ngroups": 2, "chunk_size": 256, "dtype": "float16"}
#: Case name -> (operator, params, schedule choices).
CASES = {
    "gemm": ("gemm", {"m": 1000, "n": 2048, "k": 512, "dtype": "float16"},
             GEMM_WARP_SPECIALIZED),
    # 8-bit inputs (byte tensor maps), fp32 scales through pointers, a bf16 output.
    "gemm_fp8": ("gemm", {"m": 1000, "n": 2048, "k": 512, "dtype": "float8_e4m3",
                          "b_layout": "nk"}, GEMM_WARP_SPECIALIZED),
    "attention": ("attention", {"batch": 1, "heads": 8, "kv_heads": 2, "seq_q": 300,
                                "seq_kv": 300, "head_dim": 64, "causal": True,
                                "dtype": "bfloat16"},
                  {**FLASH_ATTENTION_3, "map_store": "cuda_core", "map_softmax_exp2": "sfu"}),
    # Tensor maps and plain pointers (x, D, dt, dA_cumsum), the output after them.
    "mamba2_chunk_scan": ("mamba2_chunk_scan", MAMBA2_PARAMS,
                          {**MAMBA2_CHUNK_SCAN, "map_vector_loads": "cuda_core"}),
    # Ampere-class code on the GPU (copy maps filled field by field, cp.async, mma.sync).
    "gemm_sm80": ("gemm", {"m": 1000, "n": 2048, "k": 512, "dtype": "bfloat16",
                           "b_layout": "kn"}, AMPERE_GEMM),
}
#: The device each case is rendered for (the H200 unless named here).
CASE_DEVICES = {"gemm_sm80": running_code_of(DEVICE, "sm_80")}

#: A kernel with a workspace between its tensors; it counts its launches there, in c[0].
COUNTER_SOURCE = r"""
struct alignas(64) TensorMap { unsigned long long opaque[16]; };
extern "C" __global__ void count_launches(const unsigned short* a, unsigned int* counters,
                                          unsigned short* c, int n) {
  if (threadIdx.x == 0 && n > 0) c[0] = (unsigned short)atomicAdd(counters, 1u);
}
"""
COUNTER_BYTES = 32 << 20


def _counter_artifact() -> KernelArtifact:
    params = {"m": 16, "n": 16, "k": 16, "dtype": "float16"}
    a, _, c = (TensorArg(t.name, t.dtype, t.shape, t.role)
               for t in parse_spec("gemm", params).tensors())
    return KernelArtifact(
        op="gemm", params=params, schedule_hash="c0ffee" * 10, source=COUNTER_SOURCE,
        entry="count_launches", grid=(1, 1, 1), block=(32, 1, 1), dynamic_smem_bytes=0,
        args=(a, WorkspaceArg("counters", COUNTER_BYTES), c, ScalarArg("n", "int32", 16)))


def _artifact(case: str):
    op, params, choices = CASES[case]
    spec = parse_spec(op, params)
    device = CASE_DEVICES.get(case, DEVICE)
    return render(plan_sprogram(spec, device, choices), spec, device)


def test_the_header_takes_the_tensors_in_contract_order() -> None:
    artifact = _artifact("attention")
    files = export_files(artifact)
    header = files[f"{launch_name(artifact)}.h"]
    assert (f"cudaError_t {launch_name(artifact)}(const void* q, const void* k, const void* v, "
            "void* o, void* lse, cudaStream_t stream);") in header
    assert files["kernel.cu"] == artifact.source
    q_map = next(a for a in artifact.args if a.name == "q_map")
    dims = ", ".join(f"(cuuint64_t){d}" for d in q_map.global_dims)
    assert f"const cuuint64_t dims[] = {{{dims}}};" in files["launch.cu"]
    launch = f"<<<dim3({artifact.grid[0]}, 1, 1), dim3({artifact.block[0]}, 1, 1)"
    assert launch in files["launch.cu"]


def test_pointer_inputs_take_their_contract_place() -> None:
    """The chunk scan reads x through a tensor map and a pointer, and D through a pointer
    passed after its output: the header still lists the contract's order."""
    artifact = _artifact("mamba2_chunk_scan")
    header = export_files(artifact)[f"{launch_name(artifact)}.h"]
    assert (f"{launch_name(artifact)}(const void* cb, const void* x, const void* dt, "
            "const void* dA_cumsum, const void* c, const void* states, const void* D, "
            "void* out, cudaStream_t stream);") in header


def test_a_workspace_is_allocated_by_the_first_call_and_passed_in_its_place() -> None:
    """The header takes only the tensors; launch.cu allocates and zeroes the workspace once
    per process and device and passes it where the kernel's parameters have it."""
    artifact = _counter_artifact()
    files = export_files(artifact)
    name = launch_name(artifact)
    assert f"cudaError_t {name}(const void* a, void* c, cudaStream_t stream);" in files[
        f"{name}.h"]
    launch = files["launch.cu"]
    assert "cudaMalloc(&fresh, bytes)" in launch
    assert "cudaMemsetAsync(fresh, 0, bytes, stream)" in launch
    assert "static void* counters_by_device[16] = {};" in launch
    assert (f"pipetune_workspace(counters_by_device[device], {COUNTER_BYTES}ull, stream)"
            in launch)
    pointer = "static_cast<unsigned short*>(const_cast<void*>(static_cast<const void*>({})))"
    assert (f"0, stream>>>({pointer.format('a')}, counters, {pointer.format('c')}, 16);"
            in launch)
    assert "#include <mutex>" in launch and "#include <mutex>" not in export_files(
        _artifact("gemm"))["launch.cu"]


def _compile_and_link(artifact: KernelArtifact, directory: Path) -> None:
    """The export's launch.cu and example.cu compiled, and linked where the driver stubs
    are found."""
    for name, text in export_files(artifact).items():
        (directory / name).write_text(text)
    arch = build_target(artifact).nvcc_arch
    for source in ("launch.cu", "example.cu"):
        done = subprocess.run([str(nvcc_path()), *arch, "-std=c++17", "-c", source],
                              cwd=directory, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
    stubs = Path(str(nvcc_path())).resolve().parent.parent / "lib64" / "stubs"
    if stubs.is_dir():  # libcuda without a driver: the link resolves the driver API
        done = subprocess.run([str(nvcc_path()), *arch, "-o", "example", "example.o",
                               "launch.o", f"-L{stubs}", "-lcuda"], cwd=directory,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_export_builds_with_nvcc(case: str, tmp_path: Path) -> None:
    _compile_and_link(_artifact(case), tmp_path)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not on PATH")
def test_the_export_of_a_kernel_with_a_workspace_builds_with_nvcc(tmp_path: Path) -> None:
    _compile_and_link(_counter_artifact(), tmp_path)


def _build(case: str, directory: Path, link: list[str]):
    """The export of ``case``'s artifact in ``directory``, compiled and linked as BUILD.txt
    says."""
    artifact = _artifact(case)
    for name, text in export_files(artifact).items():
        (directory / name).write_text(text)
    done = subprocess.run([str(nvcc_path()), *build_target(artifact).nvcc_arch, "-std=c++17",
                           "-o", "example", "example.cu", "launch.cu", *link], cwd=directory,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return artifact


@pytest.mark.gpu
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_exported_example_matches_the_reference(case: str, tmp_path: Path) -> None:
    import cupy
    import numpy as np

    from workers._dtypes import storage_dtype, to_float32
    from workers.contract import check_tensor_args, contract
    from workers.inputs import build_inputs
    from workers.verify import error_bounds, reference, rel_l2_error

    if nvcc_path() is None:
        pytest.skip("nvcc is not on PATH")
    artifact = _build(case, tmp_path, ["-lcuda"])
    op, params = artifact.op, artifact.params
    dtypes = check_tensor_args(op, params, [a for a in artifact.args if isinstance(a, TensorArg)])
    specs = contract(op, params)
    inputs = build_inputs(cupy, op, params, dtypes, seed=11)
    for name, array in inputs.items():
        cupy.asnumpy(cupy.ascontiguousarray(array)).tofile(tmp_path / f"{name}.bin")
    done = subprocess.run(["./example", str(tmp_path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    inputs32 = {n: to_float32(cupy, a, dtypes[n]) for n, a in inputs.items()}
    expected = reference(cupy, op, params, inputs32)
    for name, bound in error_bounds(specs, dtypes).items():
        raw = np.fromfile(tmp_path / f"{name}.bin", dtype=storage_dtype(np, dtypes[name]))
        out32 = to_float32(cupy, cupy.asarray(raw).reshape(specs[name].shape), dtypes[name])
        assert rel_l2_error(cupy, out32, expected[name].astype(cupy.float32)) <= bound, name


#: Calls the counter kernel's launch function twice, printing what c[0] held after each.
CALL_TWICE = r"""
#include <cstdio>
#include "{header}"
int main() {{
  void* a = nullptr;
  void* c = nullptr;
  if (cudaMalloc(&a, 512) != cudaSuccess || cudaMalloc(&c, 512) != cudaSuccess) return 2;
  unsigned short seen[2];
  for (int i = 0; i < 2; ++i) {{
    if ({name}(a, c, 0) != cudaSuccess) return 3;
    if (cudaMemcpy(&seen[i], c, 2, cudaMemcpyDeviceToHost) != cudaSuccess) return 4;
  }}
  std::printf("%u %u\n", seen[0], seen[1]);
  return 0;
}}
"""


@pytest.mark.gpu
def test_the_exported_workspace_starts_zeroed_and_persists_across_calls(
        tmp_path: Path) -> None:
    if nvcc_path() is None:
        pytest.skip("nvcc is not on PATH")
    artifact = _counter_artifact()
    name = launch_name(artifact)
    for file, text in export_files(artifact).items():
        (tmp_path / file).write_text(text)
    (tmp_path / "twice.cu").write_text(CALL_TWICE.format(header=f"{name}.h", name=name))
    done = subprocess.run([str(nvcc_path()), *HOPPER.nvcc_arch, "-std=c++17", "-o", "twice",
                           "twice.cu", "launch.cu", "-lcuda"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    done = subprocess.run(["./twice"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "0 1"), done.stdout + done.stderr
