// CUTLASS 2.x's multistage sm_80 tensor-op GEMM, the Ampere-class GEMM peer of
// bench/gemm_sm80.py: C (row-major) = A (m x k, row-major) B, with B k x n row-major
// ("kn") or n x k row-major ("nk", a column-major k x n), fp16 or bf16 in and out, fp32
// accumulation; one instantiation per tile configuration of CUTLASS's sm_80 profiler set.
// Built against the public NVIDIA/cutlass headers (a git-ignored folder, never committed):
//   nvcc -O3 -std=c++17 -shared -Xcompiler -fPIC -I$CUTLASS/include \
//        -gencode=arch=compute_80,code=sm_90 -o libsm80_gemm.so sm80_gemm.cu
#include <cuda_runtime.h>

#include "cutlass/gemm/device/gemm.h"

namespace {

template <typename Element, typename LayoutB, int TM, int TN, int TK, int WM, int WN, int WK,
          int Stages>
int run(int m, int n, int k, const void* a, const void* b, void* c, cudaStream_t stream) {
  using Gemm = cutlass::gemm::device::Gemm<
      Element, cutlass::layout::RowMajor, Element, LayoutB, Element, cutlass::layout::RowMajor,
      float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
      cutlass::gemm::GemmShape<TM, TN, TK>, cutlass::gemm::GemmShape<WM, WN, WK>,
      cutlass::gemm::GemmShape<16, 8, 16>,
      cutlass::epilogue::thread::LinearCombination<
          Element, 128 / cutlass::sizeof_bits<Element>::value, float, float>,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, Stages>;
  const int ldb = cutlass::platform::is_same<LayoutB, cutlass::layout::RowMajor>::value ? n : k;
  typename Gemm::Arguments args({m, n, k}, {static_cast<const Element*>(a), k},
                                {static_cast<const Element*>(b), ldb},
                                {static_cast<Element*>(c), n}, {static_cast<Element*>(c), n},
                                {1.0f, 0.0f});
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return 1;
  if (gemm.initialize(args, nullptr, stream) != cutlass::Status::kSuccess) return 2;
  return gemm.run(stream) == cutlass::Status::kSuccess ? 0 : 3;
}

template <typename Element, typename LayoutB>
int by_config(int config, int m, int n, int k, const void* a, const void* b, void* c,
              cudaStream_t s) {
  switch (config) {
    case 0: return run<Element, LayoutB, 128, 256, 32, 64, 64, 32, 3>(m, n, k, a, b, c, s);
    case 1: return run<Element, LayoutB, 256, 128, 32, 64, 64, 32, 3>(m, n, k, a, b, c, s);
    case 2: return run<Element, LayoutB, 128, 128, 32, 64, 64, 32, 4>(m, n, k, a, b, c, s);
    case 3: return run<Element, LayoutB, 128, 128, 64, 64, 64, 64, 3>(m, n, k, a, b, c, s);
    case 4: return run<Element, LayoutB, 64, 128, 32, 32, 64, 32, 6>(m, n, k, a, b, c, s);
    case 5: return run<Element, LayoutB, 128, 64, 32, 64, 32, 32, 6>(m, n, k, a, b, c, s);
    default: return 4;
  }
}

}  // namespace

extern "C" {

// The tile configurations, in the order `config` numbers them.
const char* pipetune_cutlass_sm80_configs =
    "128x256x32_64x64x32_3;256x128x32_64x64x32_3;128x128x32_64x64x32_4;"
    "128x128x64_64x64x64_3;64x128x32_32x64x32_6;128x64x32_64x32x32_6";

// 0 when launched on `stream`; else why not (1: shape refused, 2: initialise, 3: launch,
// 4: no such configuration or type).
int pipetune_cutlass_sm80_gemm(int config, int bf16, int b_nk, int m, int n, int k,
                               const void* a, const void* b, void* c, cudaStream_t stream) {
  using RowB = cutlass::layout::RowMajor;
  using ColB = cutlass::layout::ColumnMajor;
  if (bf16) {
    return b_nk ? by_config<cutlass::bfloat16_t, ColB>(config, m, n, k, a, b, c, stream)
                : by_config<cutlass::bfloat16_t, RowB>(config, m, n, k, a, b, c, stream);
  }
  return b_nk ? by_config<cutlass::half_t, ColB>(config, m, n, k, a, b, c, stream)
              : by_config<cutlass::half_t, RowB>(config, m, n, k, a, b, c, stream);
}

}  // extern "C"
