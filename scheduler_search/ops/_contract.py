"""The tensor contract of an operator: its tensors, in argument order, as plain data.

``OperatorSpec.tensors()`` is the one home of these facts. Code generation takes its
argument list from it (``codegen.pipeline.lower``); a worker job carries it
(``workers.Job.tensors``) and the worker draws, poisons and checks tensors by it; a loaded
kernel checks the caller's tensors against it (``workers.kernels``). Everything here is
JSON-able (``to_dict`` / ``from_dict``) so it can cross the pipe to a worker.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

#: Bytes per element of every dtype a workload tensor may have.
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4,
                               "float8_e4m3": 1, "float8_e5m2": 1, "int32": 4}

Role = Literal["input", "output"]
InitKind = Literal["normal", "uniform", "time_step", "decay_cumsum", "chunk_gram",
                   "attention_o", "attention_lse", "sequence_ids"]


@dataclass(frozen=True)
class InputInit:
    """How a worker fills an input with seeded random values, never all zeros.

    The spec says which law, as data; ``workers.inputs`` draws it. Kinds:

    - ``normal``: a standard normal times ``scale``, rounded to the tensor's dtype.
    - ``uniform``: uniform in [``low``, ``high``) (FP8 GEMMs' per-tensor scales).
    - ``time_step``: Mamba2's Δt per (chunk, position), uniform in [``low``, ``high``),
      zero past ``length`` positions (a ragged last chunk adds nothing).
    - ``decay_cumsum``: the cumulative sum over each chunk of Δt·A, Δt the input named
      ``source`` and A < 0 per head (axis 1) drawn from -U[``low``, ``high``): decaying
      states, as a trained model's are.
    - ``chunk_gram``: C·Bᵀ per chunk (Mamba2's ``cb``), C the input named ``source`` as
      the kernel reads it and B drawn like it (a normal times ``scale``).
    - ``attention_o`` / ``attention_lse``: the attention forward's output and fp32
      log-sum-exp of the inputs ``source`` names (``q,k,v``), ``causal`` and with heads
      second (``heads_second``: bhsd) as the workload's: the backward's inputs must be
      the forward's of its q, k, v (its softmax is recomputed from lse).

    - ``sequence_ids``: Mamba2's ``seq_idx`` (batch, seqlen): ids of sequences packed in
      a row, non-decreasing from 0, up to ``high`` sequences a row; one boundary falls on a
      multiple of ``length`` (a chunk's start) and the others anywhere.

    ``draw`` orders the draws from the workload's one random generator (lower first, ties
    in argument order): a tensor comes after those it derives from, and one added to a
    contract later draws last, so that the other inputs of a seed keep their values.
    """

    kind: InitKind = "normal"
    scale: float = 1.0
    low: float = 0.0
    high: float = 1.0
    source: str = ""
    length: int | None = None
    draw: int = 0
    causal: bool = False
    heads_second: bool = False


@dataclass(frozen=True)
class TensorSpec:
    """One workload tensor: shape is outermost first, row-major (last dim contiguous).

    ``dtype`` is the workload's; a kernel may instead take the tensor in one of
    ``other_dtypes`` (its argument list says which). ``init`` is how an input is drawn
    (outputs are poisoned instead). ``rel_error_bound`` holds an output to its own
    relative-L2 bound where its dtypes' bound is too loose (attention's fp32 log-sum-exp).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    role: Role
    other_dtypes: tuple[str, ...] = ()
    init: InputInit = InputInit()
    rel_error_bound: float | None = None

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Every dtype a kernel may take this tensor in, the workload's first."""
        return tuple(dict.fromkeys((self.dtype, *self.other_dtypes)))

    @property
    def default_dtype(self) -> str:
        """The dtype a worker builds the tensor in when no kernel picks another."""
        return self.dtype

    @property
    def size_bytes(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count * DTYPE_BYTES[self.dtype]

    def in_dtype(self, dtype: str) -> TensorSpec:
        """This tensor as a kernel takes it: in ``dtype`` (one of :attr:`dtypes`) only.

        Raises:
            ValueError: the contract does not allow ``dtype`` for this tensor.
        """
        if dtype not in self.dtypes:
            raise ValueError(f"tensor {self.name!r} has dtype {dtype}, expected one of "
                             f"{self.dtypes}")
        return replace(self, dtype=dtype, other_dtypes=())

    def describe(self) -> str:
        """``name (AxB dtype)``, as error messages name a tensor."""
        return f"{self.name} ({'x'.join(str(d) for d in self.shape)} {self.dtype})"

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (lists for tuples) suitable for JSON."""
        data = asdict(self)
        data["shape"] = list(self.shape)
        data["other_dtypes"] = list(self.other_dtypes)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TensorSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(
            name=data["name"],
            shape=tuple(data["shape"]),
            dtype=data["dtype"],
            role=data["role"],
            other_dtypes=tuple(data.get("other_dtypes", ())),
            init=InputInit(**data.get("init", {})),
            rel_error_bound=data.get("rel_error_bound"),
        )
