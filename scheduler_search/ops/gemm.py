"""GEMM: c[m,n] = a[m,k] @ b[k,n] with fp32 accumulation (b stored kn or nk)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from scheduler_search.hardware.model import UnitKind
from scheduler_search.ir import STaskGraph, STaskKind, TileShape
from scheduler_search.ops._base import MAX_DIM, DType, OperatorSpec, TensorSpec, row_alignment_error
from scheduler_search.ops._contract import InputInit
from scheduler_search.ops._graph_helpers import TMA_OR_CORES, TMA_OR_LSU, stask, tensors

Dim = Annotated[int, Field(ge=1, le=MAX_DIM)]


class GemmSpec(OperatorSpec):
    """``c = a @ b``: a is (m, k) row-major; b is (k, n) (``kn``) or (n, k) (``nk``)."""

    streams: ClassVar[dict[str, tuple[str, ...]]] = {"ab": ("load_a", "load_b")}
    op: ClassVar[str] = "gemm"
    baseline: ClassVar[str | None] = "cublas"

    m: Dim
    n: Dim
    k: Dim
    dtype: DType = "float16"
    b_layout: Literal["kn", "nk"] = "kn"

    def cross_field_errors(self) -> Iterator[tuple[str, str]]:
        # Rows that TMA loads: a's rows hold k elements; b's rows hold n (kn) or k (nk).
        rows = {"k": self.k, "n": self.n} if self.b_layout == "kn" else {"k": self.k}
        for field, elements in rows.items():
            message = row_alignment_error(field, elements, self.dtype)
            if message:
                yield field, message

    def tensors(self) -> list[TensorSpec]:
        b_shape = (self.k, self.n) if self.b_layout == "kn" else (self.n, self.k)
        operand = InputInit("normal", scale=0.5)
        return [
            TensorSpec("a", (self.m, self.k), self.dtype, "input", init=operand),
            TensorSpec("b", b_shape, self.dtype, "input", init=operand),
            TensorSpec("c", (self.m, self.n), self.dtype, "output"),
        ]

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
            stask(
                "store", STaskKind.STORE, "c[m,n]", ("acc[m,n]",), TMA_OR_CORES, phase="epilogue"
            ),
        )
        return STaskGraph(
            op=self.op,
            stasks=stasks,
            tensors=tensors(
                a=(self.dtype, "global"),
                b=(self.dtype, "global"),
                c=(self.dtype, "global"),
                a_s=(self.dtype, "shared"),
                b_s=(self.dtype, "shared"),
                acc=("float32", "register"),
            ),
            extents={"m": self.m, "n": self.n, "k": self.k},
            tile=dict(tile),
            spatial_axes=("m", "n"),
            reduction_axes=("k",),
        )
