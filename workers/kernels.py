"""Run a tuned kernel: a :class:`LoadedKernel` (what ``workers.load`` returns for a
KernelArtifact) is a callable over CuPy arrays or torch tensors.

The KernelArtifact that ``GET /v1/kernels/{hash}`` returns (or ``pipetune render`` writes)
is everything needed: the source is compiled with NVRTC through CuPy (the same options the
workers timed it with), TMA descriptors are encoded over the caller's tensors
(``workers.tensor_maps``), and grid, block and dynamic shared memory come from the
artifact. Nothing of the service is needed, only CuPy and the CUDA driver bindings
(``pip install 'pipetune[gpu-cuda13]'``); PyTorch only if you pass torch tensors.

Example:
    import json, urllib.request
    import torch
    from workers import load

    body = urllib.request.urlopen(f"http://localhost:8000/v1/kernels/{kernel_hash}").read()
    gemm = load(body)                     # JSON text, a dict, or a KernelArtifact
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    c = gemm(a, b)                        # or gemm(a=a, b=b, c=out)
    torch.testing.assert_close(c, a @ b, rtol=2e-2, atol=2e-1)

Arguments are the operator's tensors by name (its tensor contract, the spec's ``tensors()``
in ``scheduler_search/ops``: ``a``, ``b`` and output ``c`` for a GEMM; a loaded kernel's
``expected`` lists them), inputs positionally in that order or by keyword; the outputs are
allocated (like the first input: CuPy or torch) unless passed by name, and returned
(attention returns ``(o, lse)``: the output and its fp32 log-sum-exp). Every tensor is
checked against the kernel's contract (names, shapes, dtypes, row-major contiguity, device
memory, 16-byte alignment for TMA) before anything is launched, with an error that says
what was expected; the checks and the packed arguments (device pointers,
TMA descriptors) are kept per argument signature, so a repeated call only launches. The
kernel is launched on torch's current stream for torch tensors (capturable by
``torch.cuda.graph``), on CuPy's current stream for CuPy arrays.
bfloat16: a torch ``bfloat16`` tensor, or a CuPy ``uint16`` array of bfloat16 bits.

The kernels of a size range (a ``RangeArtifact``, ``GET /v1/ranges/{id}/artifact``) load
as one :class:`workers.ranges.RangeKernel`, which launches each call's size on its bucket's
kernel; kernels of one source share one compiled module (:class:`KernelModule`).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from codegen.artifact import KernelArtifact, RangeArtifact, TensorMapArg, WorkspaceArg
from scheduler_search.ops import TensorSpec
from workers.contract import check_tensor_args, contract
from workers.launch import DriverLaunch, DriverLaunchError, error_name, pack_arguments

#: TMA reads global memory from 16-byte aligned addresses (cuTensorMapEncodeTiled).
TENSOR_ALIGN_BYTES = 16
#: Dynamic shared memory above this needs the kernel's opt-in attribute (CUDA guide,
#: "Shared Memory": 48 KB is the default per-block limit).
_DEFAULT_DYNAMIC_SMEM_BYTES = 48 * 1024
#: Storage dtypes accepted for an element type (bfloat16 travels as its 16-bit pattern,
#: the 8-bit floats as PyTorch's float8 types or their bytes).
_ACCEPTED_DTYPES = {
    "float16": ("float16",),
    "bfloat16": ("bfloat16", "uint16", "int16"),
    "float32": ("float32",),
    "float8_e4m3": ("float8_e4m3fn", "uint8"),
    "float8_e5m2": ("float8_e5m2", "uint8"),
    "int32": ("int32",),
}


class KernelArgumentError(TypeError, ValueError):
    """The tensors given do not fit the kernel's contract (the message says how)."""


@dataclass(frozen=True)
class TensorInfo:
    """What the checks need to know of one tensor the caller passed."""

    dtype: str
    shape: tuple[int, ...]
    contiguous: bool
    on_device: bool
    data_ptr: int
    kind: str = "cupy"  # "cupy" or "torch"


def as_artifact(artifact: Any) -> KernelArtifact:
    """A KernelArtifact from itself, its dict, its JSON text (bytes too), or the body of
    ``GET /v1/kernels/{hash}`` (``{"hash", "schedule_hash", "artifact": {...}}``)."""
    artifact = plain_artifact(artifact)
    if isinstance(artifact, KernelArtifact):
        return artifact
    if isinstance(artifact, RangeArtifact) or artifact.get("kind") == "range":
        raise ValueError("a RangeArtifact, not a KernelArtifact: load() it for a RangeKernel")
    try:
        return KernelArtifact.from_dict(dict(artifact))
    except KeyError as exc:
        raise ValueError(f"not a KernelArtifact: missing field {exc}") from exc


def plain_artifact(artifact: Any) -> KernelArtifact | RangeArtifact | Mapping[str, Any]:
    """An artifact as given to ``load``: a KernelArtifact or RangeArtifact as is; JSON
    text (bytes too) parsed; an API body that wraps it (``{..., "artifact": {...}}``)
    unwrapped to the artifact's dict."""
    if isinstance(artifact, KernelArtifact | RangeArtifact):
        return artifact
    if isinstance(artifact, bytes | bytearray):
        artifact = artifact.decode()
    if isinstance(artifact, str):
        try:
            artifact = json.loads(artifact)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a KernelArtifact JSON text: {exc}") from exc
    if isinstance(artifact, Mapping):
        inner = artifact.get("artifact")
        if isinstance(inner, Mapping) and "source" not in artifact and "buckets" not in artifact:
            artifact = inner
        return artifact
    raise TypeError(
        f"load() takes a KernelArtifact or RangeArtifact, its dict or its JSON text, not "
        f"{type(artifact).__name__}"
    )


def expected_tensors(artifact: KernelArtifact) -> list[TensorSpec]:
    """The tensors the kernel reads and writes, in contract order (inputs, then outputs),
    each in the dtype the kernel takes it in.

    The contract is the operator spec's for the artifact's workload, the one the worker
    measured the kernel on; the artifact's arguments are checked against it.
    """
    specs = contract(artifact.op, artifact.params)
    dtypes = check_tensor_args(artifact.op, artifact.params, artifact.args, specs.values())
    return [spec.in_dtype(dtypes[name]) for name, spec in specs.items()]


def bind_arguments(
    expected: list[TensorSpec], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """Map positional inputs and keyword tensors to names; (bound, outputs to allocate).

    Raises:
        KernelArgumentError: too many inputs, an unknown or repeated name, a missing input.
    """
    inputs = [t for t in expected if t.role == "input"]
    outputs = [t for t in expected if t.role == "output"]

    def signature() -> str:  # only for the error messages
        text = ", ".join(t.describe() for t in inputs)
        return text + (", output " + ", ".join(t.describe() for t in outputs) if outputs else "")

    if len(args) > len(inputs):
        raise KernelArgumentError(
            f"kernel takes {len(inputs)} input tensor(s) positionally, got {len(args)}; "
            f"expected {signature()}"
        )
    bound = {t.name: value for t, value in zip(inputs, args, strict=False)}
    known = {t.name for t in expected}
    for name, value in kwargs.items():
        if name not in known:
            raise KernelArgumentError(f"unknown tensor {name!r}; expected {signature()}")
        if name in bound:
            raise KernelArgumentError(f"tensor {name!r} given twice (by position and name)")
        bound[name] = value
    missing = [t.name for t in inputs if t.name not in bound]
    if missing:
        raise KernelArgumentError(f"missing input tensor(s) {missing}; expected {signature()}")
    return bound, [t.name for t in outputs if t.name not in bound]


def check_tensor(expected: TensorSpec, info: TensorInfo) -> None:
    """Raise :class:`KernelArgumentError` if ``info`` cannot stand for ``expected``."""
    name = expected.name
    if not info.on_device:
        raise KernelArgumentError(
            f"{name}: is in host memory; the kernel needs a CUDA tensor (a CuPy array or a "
            f"torch tensor on a CUDA device)"
        )
    if info.dtype not in _ACCEPTED_DTYPES.get(expected.dtype, (expected.dtype,)):
        hint = " (CuPy: a uint16 array of bfloat16 bits)" if expected.dtype == "bfloat16" else ""
        raise KernelArgumentError(
            f"{name}: dtype {info.dtype}, the kernel was tuned for {expected.dtype}{hint}"
        )
    if tuple(info.shape) != expected.shape:
        raise KernelArgumentError(
            f"{name}: shape {tuple(info.shape)}, the kernel was tuned for {expected.shape}; "
            f"tune the new shape (POST /v1/tune) for another kernel"
        )
    if not info.contiguous:
        raise KernelArgumentError(
            f"{name}: must be contiguous and row-major (torch: .contiguous(); CuPy: "
            f"cupy.ascontiguousarray)"
        )
    if info.data_ptr % TENSOR_ALIGN_BYTES:
        raise KernelArgumentError(
            f"{name}: data pointer {info.data_ptr:#x} is not {TENSOR_ALIGN_BYTES}-byte aligned "
            f"(TMA needs it; a fresh tensor is)"
        )


def describe_tensor(value: Any) -> TensorInfo:
    """A TensorInfo of a CuPy array or torch tensor (anything else: TypeError)."""
    module = type(value).__module__ or ""
    if module.startswith("torch") and hasattr(value, "data_ptr"):
        return TensorInfo(
            dtype=str(value.dtype).removeprefix("torch."),
            shape=tuple(int(d) for d in value.shape),
            contiguous=bool(value.is_contiguous()),
            on_device=value.device.type == "cuda",
            data_ptr=int(value.data_ptr()),
            kind="torch",
        )
    if hasattr(value, "__cuda_array_interface__") and hasattr(value, "data"):
        flags = getattr(value, "flags", None)
        return TensorInfo(
            dtype=str(value.dtype),
            shape=tuple(int(d) for d in value.shape),
            contiguous=bool(flags.c_contiguous) if flags is not None else False,
            on_device=True,
            data_ptr=int(value.data.ptr),
            kind="cupy",
        )
    if hasattr(value, "__array_interface__"):
        return TensorInfo(
            dtype=str(value.dtype),
            shape=tuple(int(d) for d in value.shape),
            contiguous=True,
            on_device=False,
            data_ptr=0,
            kind="numpy",
        )
    raise KernelArgumentError(
        f"expected a CuPy array or a torch tensor, got {type(value).__name__}"
    )


#: Argument signatures whose packed launch a kernel keeps (a few buffers cycled by a user).
_PACKED_LAUNCHES_KEPT = 16
#: What ``cuLaunchKernel`` answers from a thread whose current context is not the
#: kernel's (CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_HANDLE): nothing was launched,
#: and the launch is made again inside the tensors' device.
_OTHER_CONTEXT_RESULTS = frozenset({201, 400})


@dataclass(frozen=True)
class _PackedLaunch:
    """A checked call's launch, ready to run again on the same tensors."""

    launch: DriverLaunch
    device: int
    framework: str


class KernelModule:
    """One kernel source compiled once, and its ``CUfunction`` per (entry, device).

    Shared by every :class:`LoadedKernel` of the same source and compile options
    (:meth:`shared`): the kernels of one range bucket, bound to different sizes, are one
    module (one NVRTC compile, one ``cuModuleLoad`` per device), as are two ``load`` calls
    of one artifact. Compiled on the first :meth:`function` call, so making one is cheap
    and needs no GPU.
    """

    #: (source, options) -> the module, while a kernel holds it.
    _shared: ClassVar[weakref.WeakValueDictionary[tuple[str, tuple[str, ...]],
                                                  KernelModule]] = weakref.WeakValueDictionary()
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, source: str, options: tuple[str, ...]) -> None:
        self.source = source
        self.options = tuple(options)
        self._raw: Any = None  # the cupy.RawModule
        self._functions: dict[tuple[str, int], int] = {}
        self._smem_bytes: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, source: str, options: tuple[str, ...]) -> KernelModule:
        """The module of ``source`` compiled with ``options``, the same object for as long
        as a kernel holds it."""
        key = (source, tuple(options))
        with cls._shared_lock:
            module = cls._shared.get(key)
            if module is None:
                module = cls._shared[key] = cls(source, tuple(options))
        return module

    @property
    def compiled(self) -> bool:
        """Whether the source has been compiled (by a first launch)."""
        return self._raw is not None

    def function(self, entry: str, device: int, dynamic_smem_bytes: int = 0) -> int:
        """The ``CUfunction`` of ``entry`` on ``device``, compiled and loaded there once,
        allowed ``dynamic_smem_bytes`` of dynamic shared memory."""
        key = (entry, device)
        function = self._functions.get(key)
        if function is None or dynamic_smem_bytes > self._smem_bytes[key]:
            with self._lock:
                function = self._load(entry, device, dynamic_smem_bytes)
        return function

    def global_array(self, name: str, device: int, dtype: str, size: int) -> Any:
        """A CuPy view of the module's ``__device__`` array ``name`` of ``size`` elements
        on ``device``, once a launch has loaded the module there: what an instrumented
        source records (``bench/decode_timeline.py``), read back or reset between calls."""
        import cupy

        if self._raw is None:
            raise RuntimeError("the module is loaded by its first launch")
        with cupy.cuda.Device(device):
            pointer = self._raw.get_global(name)
            return cupy.ndarray((size,), dtype=dtype, memptr=pointer)

    def _load(self, entry: str, device: int, dynamic_smem_bytes: int) -> int:
        import cupy

        key = (entry, device)
        with cupy.cuda.Device(device):
            if self._raw is None:
                self._raw = cupy.RawModule(code=self.source, options=self.options)
            kernel = self._raw.get_function(entry)
            allowed = max(dynamic_smem_bytes, self._smem_bytes.get(key, 0))
            if allowed > _DEFAULT_DYNAMIC_SMEM_BYTES:
                kernel.max_dynamic_shared_size_bytes = allowed
            self._smem_bytes[key] = allowed
            function = self._functions[key] = int(kernel.kernel.ptr)
        return function


class Workspaces:
    """A kernel's workspaces (``WorkspaceArg``: scratch memory it keeps across launches)
    per device: allocated zeroed by the first launch there, in that launch's framework
    and on its current stream, and held while this object lives.

    One object may serve several kernels whose workspaces are the same (the sizes of a
    range bucket: one kernel bound to different sizes): their launches on one stream are
    ordered, and each leaves the workspace as it found it.
    """

    def __init__(self, args: tuple[WorkspaceArg, ...]) -> None:
        self.args = tuple(args)
        #: Device -> each workspace's buffer there, by name.
        self._buffers: dict[int, dict[str, Any]] = {}

    def pointers(self, device: int, like: Any) -> dict[str, int]:
        """Each workspace's pointer on ``device``, allocated by the first call there and
        zeroed in ``like``'s framework on its current stream, so before that call's launch.
        (A first call inside a graph capture would capture the zero-fill rather than run it:
        warm up outside the capture, as for the compile.)"""
        buffers = self._buffers.get(device)
        if buffers is None:
            buffers = self._buffers[device] = {
                arg.name: _zeroed_bytes(arg.bytes, like) for arg in self.args}
        return {name: describe_tensor(buffer).data_ptr for name, buffer in buffers.items()}


class LoadedKernel:
    """A tuned kernel, ready to launch (see the module docstring); made by :func:`load`.

    The CUDA module is compiled on the first call (NVRTC through CuPy, cached by CuPy on
    disk), so making one is cheap and needs no GPU; kernels of the same source share it
    (:class:`KernelModule`). A kernel's workspaces (scratch memory it keeps across
    launches, ``WorkspaceArg``) are allocated zeroed by its first call on each device, in
    that call's framework and on its current stream, and kept while the callable lives.
    Two overlapping launches of one callable on different streams would share its
    workspace on that device, as they would a cuBLAS handle's workspace.

    Args:
        artifact: the kernel's launch contract.
        module: the compiled module to launch from (default: the one shared by every
            kernel of the artifact's source and options).
        workspaces: where the workspaces live (default: this kernel's own); a range
            kernel gives the sizes of one bucket one.
    """

    def __init__(self, artifact: KernelArtifact, *, module: KernelModule | None = None,
                 workspaces: Workspaces | None = None) -> None:
        if tuple(artifact.cluster) != (1, 1, 1) and "__cluster_dims__" not in artifact.source:
            raise ValueError("a cluster launch needs __cluster_dims__ in the kernel source")
        self.artifact = artifact
        self.expected = expected_tensors(artifact)
        if [t.role for t in self.expected] != sorted((t.role for t in self.expected),
                                                     key=("input", "output").index):
            raise ValueError(f"the {artifact.op} contract must list its inputs first")
        self._by_name = {t.name: t for t in self.expected}
        self._input_names = tuple(t.name for t in self.inputs)
        self._names = tuple(t.name for t in self.expected)
        self.module = module or KernelModule.shared(artifact.source,
                                                    tuple(artifact.compile_options))
        self._maps: dict[tuple[str, int], np.ndarray] = {}
        self._checked: dict[tuple[Any, ...], bool] = {}
        self._packed: dict[tuple[Any, ...], _PackedLaunch] = {}
        self._allocators: dict[type, Callable[[Any], tuple[Any, ...]]] = {}
        workspace_args = tuple(a for a in artifact.args if isinstance(a, WorkspaceArg))
        if workspaces is not None and workspaces.args != workspace_args:
            raise ValueError(f"the kernel's workspaces {workspace_args} are not the shared "
                             f"ones {workspaces.args}")
        self.workspaces = workspaces or Workspaces(workspace_args)

    @property
    def inputs(self) -> list[TensorSpec]:
        return [t for t in self.expected if t.role == "input"]

    @property
    def outputs(self) -> list[TensorSpec]:
        return [t for t in self.expected if t.role == "output"]

    def __repr__(self) -> str:
        a = self.artifact
        return (f"LoadedKernel({a.op} {a.params}, schedule {a.schedule_hash[:12]}, "
                f"tensors {', '.join(t.describe() for t in self.expected)})")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Launch on the given tensors; returns the output tensor, or the tuple of them in
        contract order (attention: ``o``, ``lse``), each allocated where not given.

        The checks and the packed launch (pointers, TMA descriptors) are done once per
        argument signature (pointers, shapes, dtypes, strides) and reused: a call like the
        previous ones only allocates its outputs and launches. Nothing on the way
        synchronises, queries the stream or allocates outside the caller's framework, so a
        call inside ``torch.cuda.graph(...)`` (or a CuPy stream capture) is captured.

        Raises:
            KernelArgumentError: a tensor does not fit the contract (nothing is launched).
        """
        if kwargs or len(args) != len(self._input_names):
            return self._call_by_name(args, kwargs)
        # The usual call, f(a, b): every step below is a dictionary hit after the first.
        given = tuple(map(_signature, args))
        if given not in self._checked:
            self._check(dict(zip(self._input_names, args, strict=True)), given)
        outputs = self._allocate(args[0])
        key = given + tuple(map(_signature, outputs))
        packed = self._packed.get(key)
        if packed is None:
            bound = dict(zip(self._names, (*args, *outputs), strict=True))
            packed = self._remember(self._packed, key, self._pack(bound, args[0]))
        self._launch(packed)
        return outputs[0] if len(outputs) == 1 else outputs

    def _call_by_name(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call with tensors by name (an output passed in, or inputs by keyword)."""
        bound, to_allocate = bind_arguments(self.expected, args, kwargs)
        given = tuple((name, _signature(value)) for name, value in bound.items())
        if given not in self._checked:
            self._check(bound, given)
        first = bound[self._input_names[0]]
        if to_allocate:
            allocated = self._allocate(first)
            for expected, value in zip(self.outputs, allocated, strict=True):
                if expected.name in to_allocate:
                    bound[expected.name] = value
        key = tuple(_signature(bound[name]) for name in self._names)
        packed = self._packed.get(key)
        if packed is None:
            packed = self._remember(self._packed, key, self._pack(bound, first))
        self._launch(packed)
        outputs = tuple(bound[t.name] for t in self.outputs)
        return outputs[0] if len(outputs) == 1 else outputs

    def _check(self, given: dict[str, Any], key: tuple[Any, ...]) -> None:
        """The caller's tensors against the contract (outputs allocated here are right by
        construction); remembered by their signature."""
        for name, value in given.items():
            check_tensor(self._by_name[name], describe_tensor(value))
        self._remember(self._checked, key, True)

    @staticmethod
    def _remember(cache: dict[Any, Any], key: Any, value: Any) -> Any:
        """``cache[key] = value``, the oldest entry dropped past a few signatures."""
        if len(cache) >= _PACKED_LAUNCHES_KEPT:
            cache.pop(next(iter(cache)))
        cache[key] = value
        return value

    def _allocate(self, like: Any) -> tuple[Any, ...]:
        """Every output, new, on ``like``'s device and framework."""
        allocator = self._allocators.get(type(like))
        if allocator is None:
            allocator = self._allocators[type(like)] = _output_allocator(self.outputs, like)
        return allocator(like)

    def _pack(self, bound: dict[str, Any], first: Any) -> _PackedLaunch:
        """Check every tensor against the contract, then lay out the kernel's arguments
        (device pointers by value, TMA descriptors encoded over them, scalars) for one
        driver launch."""
        infos = {name: describe_tensor(value) for name, value in bound.items()}
        for name, info in infos.items():
            check_tensor(self._by_name[name], info)
        devices = {_device_index(value) for value in bound.values()}
        if len(devices) != 1:
            raise KernelArgumentError(f"tensors are on different GPUs: {sorted(devices)}")
        device = devices.pop()
        pointers = {name: info.data_ptr for name, info in infos.items()}
        pointers.update(self.workspaces.pointers(device, first))
        params = pack_arguments(self.artifact.args, pointers, self._tensor_map)
        a = self.artifact
        function = self.module.function(a.entry, device, a.dynamic_smem_bytes)
        launch = DriverLaunch(function, tuple(a.grid), tuple(a.block), a.dynamic_smem_bytes,
                              params)
        return _PackedLaunch(launch, device, _framework(first))

    def _launch(self, packed: _PackedLaunch) -> None:
        """One ``cuLaunchKernel`` on the caller's current stream; made again inside the
        tensors' device when the thread's current context is another one's."""
        stream = _current_stream(packed.framework, packed.device)
        result = packed.launch(stream)
        if result in _OTHER_CONTEXT_RESULTS:
            import cupy

            with cupy.cuda.Device(packed.device):
                result = packed.launch(stream)
        if result:
            raise DriverLaunchError(f"cuLaunchKernel failed: {error_name(result)}")

    def _tensor_map(self, arg: TensorMapArg, data_ptr: int) -> np.ndarray:
        """The TMA descriptor of ``arg`` over the tensor at ``data_ptr`` (kept per address)."""
        from workers.tensor_maps import encoder_for

        key = (arg.name, data_ptr)
        if key not in self._maps:
            if len(self._maps) >= 64:
                self._maps.clear()
            self._maps[key] = encoder_for(self.artifact)(arg, data_ptr)
        return self._maps[key]


def _framework(value: Any) -> str:
    return "torch" if (type(value).__module__ or "").startswith("torch") else "cupy"


def _output_allocator(outputs: list[TensorSpec], like: Any) -> Callable[[Any], tuple]:
    """A function making every output like ``like`` (its device and framework); the
    dtypes and shapes resolved once."""
    if _framework(like) == "torch":
        import torch

        specs = [(t.shape, getattr(torch, t.dtype)) for t in outputs]
        if len(specs) == 1:
            (shape, dtype), = specs
            return lambda first: (first.new_empty(shape, dtype=dtype),)
        return lambda first: tuple(first.new_empty(shape, dtype=dtype) for shape, dtype in specs)

    def cupy_outputs(first: Any) -> tuple[Any, ...]:
        import cupy

        with cupy.cuda.Device(first.device.id):
            return tuple(cupy.empty(t.shape, dtype="uint16" if t.dtype == "bfloat16" else t.dtype)
                         for t in outputs)

    return cupy_outputs


def _zeroed_bytes(size: int, like: Any) -> Any:
    """``size`` zero bytes of device memory on ``like``'s device, in its framework."""
    if _framework(like) == "torch":
        import torch

        return torch.zeros(size, dtype=torch.uint8, device=like.device)
    import cupy

    with cupy.cuda.Device(like.device.id):
        return cupy.zeros(size, dtype=cupy.uint8)


def _current_stream(framework: str, device: int) -> int:
    """The ``CUstream`` the caller's framework launches on now: torch's current stream for
    torch tensors, CuPy's otherwise."""
    if framework == "torch":
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton reads
        if raw is not None:
            return int(raw(device))
        return int(torch.cuda.current_stream(device).cuda_stream)
    import cupy

    return int(cupy.cuda.get_current_stream(device).ptr)


def _torch_signature(value: Any) -> tuple[Any, ...]:
    return (value.data_ptr(), value.shape, value.dtype, value.stride())


def _cupy_signature(value: Any) -> tuple[Any, ...]:
    return (value.data.ptr, value.shape, value.dtype, value.strides)


def _opaque_signature(value: Any) -> tuple[Any, ...]:
    return (id(value), type(value))  # not a GPU tensor: the full checks refuse it


#: Signature function by argument type, resolved on a type's first call.
_SIGNERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {}


def _signature(value: Any) -> tuple[Any, ...]:
    """What a tensor's launch depends on: pointer, shape, dtype, strides (read from the
    attributes directly: this runs on every call). The device is implied by the pointer
    (unified virtual addressing gives every GPU its own address range)."""
    signer = _SIGNERS.get(type(value))
    if signer is None:
        if hasattr(value, "data_ptr") and hasattr(value, "stride"):  # torch
            signer = _torch_signature
        elif hasattr(value, "__cuda_array_interface__") and hasattr(
                getattr(value, "data", None), "ptr"):  # CuPy
            signer = _cupy_signature
        else:
            return _opaque_signature(value)  # not cached: an odd type may vary per instance
        _SIGNERS[type(value)] = signer
    return signer(value)


def _device_index(value: Any) -> int:
    """The CUDA device a torch tensor or CuPy array is on."""
    device = value.device
    index = getattr(device, "index", None)
    return int(index if index is not None else getattr(device, "id", 0))


__all__ = [
    "KernelArgumentError",
    "KernelModule",
    "LoadedKernel",
    "TensorInfo",
    "Workspaces",
    "as_artifact",
    "bind_arguments",
    "check_tensor",
    "describe_tensor",
    "expected_tensors",
    "plain_artifact",
]
