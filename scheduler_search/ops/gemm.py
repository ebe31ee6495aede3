"""GEMM: c[m,n] = a[m,k] @ b[k,n] with fp32 accumulation (b stored kn or nk), and an
optional fused epilogue on the accumulator: ``c = act(scale · (a @ b) + bias) + residual``.

Inputs are fp16, bf16, or 8-bit floats (``float8_e4m3`` / ``float8_e5m2``) with per-tensor
scales as ``torch._scaled_mm`` takes them: ``c = (scale_a · scale_b) · (a @ b)``, then the
epilogue, written in ``out_dtype`` (bf16 by default)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from scheduler_search.hardware.model import UnitKind
from scheduler_search.ir import STaskGraph, STaskKind, TileShape
from scheduler_search.ops._base import MAX_DIM, DType, OperatorSpec, TensorSpec, row_alignment_error
from scheduler_search.ops._contract import InputInit
from scheduler_search.ops._graph_helpers import CORES, TMA_OR_CORES, TMA_OR_LSU, stask, tensors

Dim = Annotated[int, Field(ge=1, le=MAX_DIM)]

#: Element types of a and b; the 8-bit floats need per-tensor scales and B stored n x k.
GemmDType = Literal["float16", "bfloat16", "float8_e4m3", "float8_e5m2"]
FP8_DTYPES = ("float8_e4m3", "float8_e5m2")
#: One per-tensor scale: a positive fp32 scalar on the device, as ``torch._scaled_mm``'s.
_SCALE = InputInit("uniform", low=0.5, high=2.0)

#: Activations an epilogue may apply: ``gelu`` is the exact (erf) GELU, PyTorch's default;
#: ``gelu_tanh`` its tanh approximation (``approximate="tanh"``, cuBLASLt's GELU).
Activation = Literal["none", "relu", "gelu", "gelu_tanh", "silu"]

#: CUDA-core operations per output element of each activation (for the cost model).
ACTIVATION_OPS = {"none": 0.0, "relu": 1.0, "gelu": 12.0, "gelu_tanh": 10.0, "silu": 6.0}


class GemmEpilogue(BaseModel):
    """What a GEMM applies to each fp32 accumulator before the store, in this order:
    ``c = act(scale · acc + bias[n]) + residual[m, n]`` (bias and residual in the GEMM's
    dtype, read once)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    scale: Annotated[float, Field(allow_inf_nan=False, ge=-1e30, le=1e30)] = 1.0
    bias: bool = False
    act: Activation = "none"
    residual: bool = False

    @property
    def fused(self) -> bool:
        """Whether there is anything to apply (the default epilogue is a plain store)."""
        return self != GemmEpilogue()

    def describe(self) -> str:
        """``scale·acc + bias, gelu, + residual``: the epilogue in words."""
        steps = ["acc" if self.scale == 1.0 else f"{self.scale:g}·acc"]
        if self.bias:
            steps[0] += " + bias"
        if self.act != "none":
            steps.append(self.act)
        if self.residual:
            steps.append("+ residual")
        return ", ".join(steps)


class GemmSpec(OperatorSpec):
    """``c = a @ b``: a is (m, k) row-major; b is (k, n) (``kn``) or (n, k) (``nk``)."""

    streams: ClassVar[dict[str, tuple[str, ...]]] = {"ab": ("load_a", "load_b")}
    op: ClassVar[str] = "gemm"
    runtime_dims: ClassVar[tuple[str, ...]] = ("m",)
    baseline: ClassVar[str | None] = "cublas"

    keyed_when_set: ClassVar[tuple[str, ...]] = ("epilogue", "out_dtype")

    m: Dim
    n: Dim
    k: Dim
    dtype: GemmDType = "float16"
    b_layout: Literal["kn", "nk"] = "kn"
    epilogue: GemmEpilogue = GemmEpilogue()
    #: The output's element type (default: ``dtype`` for 16-bit inputs, bf16 for 8-bit).
    out_dtype: DType | None = None

    @property
    def fp8(self) -> bool:
        return self.dtype in FP8_DTYPES

    @property
    def c_dtype(self) -> str:
        """The element type ``c`` is written in."""
        if self.out_dtype is not None:
            return self.out_dtype
        return "bfloat16" if self.fp8 else self.dtype

    @property
    def scaled(self) -> bool:
        """Whether the product has per-tensor scales to apply (8-bit inputs) or an
        epilogue: the store then applies the ``epilogue`` sTask."""
        return self.fp8 or self.epilogue.fused

    @classmethod
    def model_construct(cls, _fields_set: set[str] | None = None, **values: Any) -> GemmSpec:
        """As pydantic's (no validation: workloads already validated, tiny test shapes),
        with the epilogue still made a :class:`GemmEpilogue` from its plain dict."""
        if isinstance(values.get("epilogue"), dict):
            values["epilogue"] = GemmEpilogue.model_validate(values["epilogue"])
        return super().model_construct(_fields_set, **values)

    @property
    def cublaslt_fusable(self) -> bool:
        """Whether one cuBLASLt call through PyTorch computes this GEMM with its whole
        epilogue (:func:`cublaslt_fuses`): 16-bit inputs, written in their own type."""
        return (not self.fp8 and self.c_dtype == self.dtype
                and cublaslt_fuses(self.epilogue))

    def run_baseline(self) -> str | None:
        # With an epilogue: the call a user would otherwise make. cuBLASLt's own fused
        # epilogue where it computes the whole of it; else the matmul followed by PyTorch's
        # ops for it, unfused (8-bit inputs: after cuBLASLt's scaled matmul).
        if self.epilogue.fused:
            return "cublaslt_epilogue" if self.cublaslt_fusable else "torch_epilogue"
        return "scaled_mm" if self.fp8 else self.baseline

    def run_peers(self) -> tuple[str, ...]:
        # Beside cuBLASLt's fused call, the unfused sequence; beside the unfused sequence,
        # cuBLASLt's fused bias (and activation) followed by PyTorch's ops for the rest
        # (a residual add, an activation it lacks), where there is a bias to fuse.
        if not self.epilogue.fused or self.fp8:
            return ()
        if self.cublaslt_fusable:
            return ("torch_epilogue",)
        partial = self.epilogue.bias and self.c_dtype == self.dtype
        return ("cublaslt_epilogue",) if partial else ()

    def cross_field_errors(self) -> Iterator[tuple[str, str]]:
        # Rows that TMA loads: a's rows hold k elements; b's rows hold n (kn) or k (nk).
        rows = {"k": self.k, "n": self.n} if self.b_layout == "kn" else {"k": self.k}
        for field, elements in rows.items():
            message = row_alignment_error(field, elements, self.dtype)
            if message:
                yield field, message
        if self.fp8 and self.b_layout != "nk":
            yield ("b_layout", f"{self.dtype} inputs need B stored n x k (b_layout \"nk\"): "
                   "wgmma reads 8-bit floats K-major only, as torch._scaled_mm takes them")

    def tensors(self) -> list[TensorSpec]:
        b_shape = (self.k, self.n) if self.b_layout == "kn" else (self.n, self.k)
        operand = InputInit("normal", scale=0.5)
        found = [
            TensorSpec("a", (self.m, self.k), self.dtype, "input", init=operand),
            TensorSpec("b", b_shape, self.dtype, "input", init=operand),
        ]
        if self.fp8:  # drawn after the others: their values are a 16-bit GEMM's
            found += [TensorSpec(name, (1,), "float32", "input", init=replace(_SCALE, draw=1))
                      for name in ("scale_a", "scale_b")]
        out = self.c_dtype
        if self.epilogue.bias:
            found.append(TensorSpec("bias", (self.n,), out, "input", init=operand))
        if self.epilogue.residual:
            found.append(TensorSpec("residual", (self.m, self.n), out, "input", init=operand))
        return [*found, TensorSpec("c", (self.m, self.n), out, "output")]

    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def build_graph(self, tile: TileShape) -> STaskGraph:
        b_global = "b[k,n]" if self.b_layout == "kn" else "b[n,k]"
        b_shared = "b_s[k,n]" if self.b_layout == "kn" else "b_s[n,k]"
        stasks = (
            stask("load_a", STaskKind.LOAD, "a_s[m,k]", ("a[m,k]",), TMA_OR_LSU),
            stask("load_b", STaskKind.LOAD, b_shared, (b_global,), TMA_OR_LSU),
            stask(
                "mma",
                STaskKind.MMA,
                "acc[m,n]",
                ("a_s[m,k]", b_shared),
                (UnitKind.TENSOR_CORE,),
                expr="acc[m,n] += a[m,k] * b[k,n]",
            ),
            *self._epilogue_stasks(),
        )
        extra = {name: (self.c_dtype, "global") for name in ("bias", "residual")
                 if getattr(self.epilogue, name)}
        if self.fp8:
            extra.update(scale_a=("float32", "global"), scale_b=("float32", "global"))
        return STaskGraph(
            op=self.op,
            stasks=stasks,
            tensors=tensors(
                a=(self.dtype, "global"),
                b=(self.dtype, "global"),
                c=(self.c_dtype, "global"),
                a_s=(self.dtype, "shared"),
                b_s=(self.dtype, "shared"),
                acc=("float32", "register"),
                **extra,
                **({"out": ("float32", "register")} if self.scaled else {}),
            ),
            extents={"m": self.m, "n": self.n, "k": self.k},
            tile=dict(tile),
            spatial_axes=("m", "n"),
            reduction_axes=("k",),
        )

    def _epilogue_stasks(self) -> tuple[Any, ...]:
        """The store, after the fused epilogue's math on the CUDA cores when there is one."""
        e = self.epilogue
        if not self.scaled:
            return (stask("store", STaskKind.STORE, "c[m,n]", ("acc[m,n]",), TMA_OR_CORES,
                          phase="epilogue"),)
        reads = ("acc[m,n]", *(["scale_a[]", "scale_b[]"] if self.fp8 else []),
                 *(["bias[n]"] if e.bias else []), *(["residual[m,n]"] if e.residual else []))
        ops = 2.0 + ACTIVATION_OPS[e.act] + (1.0 if e.residual else 0.0) + float(self.fp8)
        what = f"scale_a·scale_b·({e.describe()})" if self.fp8 else e.describe()
        return (
            stask("epilogue", STaskKind.ELEMENTWISE, "out[m,n]", reads, CORES,
                  phase="epilogue", ops_per_point=ops, expr=f"out[m,n] = {what}"),
            stask("store", STaskKind.STORE, "c[m,n]", ("out[m,n]",), TMA_OR_CORES,
                  phase="epilogue"),
        )


def cublaslt_fuses(epilogue: GemmEpilogue) -> bool:
    """Whether one call, ``torch._addmm_activation(bias, a, b, alpha=scale, use_gelu=...)``
    or ``torch.addmm(bias, a, b, alpha=scale)``, computes this epilogue in cuBLASLt's:
    ``act(scale · (a @ b) + bias)`` with a bias (PyTorch takes cuBLASLt's epilogue path for
    a 1-D bias only), ReLU, tanh GELU or no activation, and no residual (see
    ``workers.baselines`` for why a residual is no part of that call)."""
    return (epilogue.bias and not epilogue.residual
            and epilogue.act in ("none", "relu", "gelu_tanh"))
