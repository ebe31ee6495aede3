"""One tensor contract: for every operator, the tensors a worker builds its inputs from (the
job's, filled from the spec by the service), the tensors ``load`` checks a caller's
arguments against, and the argument list of kernels rendered for the H200 agree: the same
names, shapes, dtypes and roles. Launch arguments are packed by one function for both. A
workspace argument is the kernel's own memory, not a tensor of the contract."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest
from schedule_samples import sample_schedules

from codegen.artifact import KernelArtifact, ScalarArg, TensorArg, TensorMapArg, WorkspaceArg
from scheduler_search.hardware import get_device
from scheduler_search.ops import OPERATORS, TensorSpec, parse_spec, workload_tensors
from scheduler_search.search import FINAL_TIMING
from service.runs.jobs import baseline_job, kernel_job
from workers import Job, load
from workers._dtypes import itemsize, storage_dtype
from workers.contract import check_tensor_args, contract
from workers.inputs import build_inputs
from workers.launch import pack_arguments

DEVICE = get_device("h200")
MAMBA2 = {"batch": 1, "seqlen": 512, "nheads": 4, "headdim": 64, "dstate": 64, "ngroups": 2,
          "chunk_size": 128, "dtype": "bfloat16"}
ATTENTION = {"batch": 1, "heads": 4, "kv_heads": 2, "seq_q": 256, "seq_kv": 256,
             "head_dim": 64, "causal": True, "dtype": "float16"}
#: Small valid workloads, every operator and layout.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("gemm", {"m": 256, "n": 512, "k": 128, "dtype": "float16", "b_layout": "kn"}),
    ("gemm", {"m": 256, "n": 256, "k": 192, "dtype": "bfloat16", "b_layout": "nk"}),
    ("attention", ATTENTION),
    ("attention", {**ATTENTION, "layout": "bhsd", "causal": False, "dtype": "bfloat16"}),
    ("attention_backward", ATTENTION),
    ("attention_backward", {**ATTENTION, "layout": "bhsd", "causal": False, "dtype": "bfloat16"}),
    ("mamba2_chunk_state", MAMBA2),
    ("mamba2_chunk_state", {**MAMBA2, "pass_states": True, "initial_states": True}),
    ("mamba2_chunk_scan", MAMBA2),
    ("mamba2_chunk_scan", {**MAMBA2, "ngroups": 1, "dtype": "float16"}),
    ("mamba2_chunk_scan", {**MAMBA2, "z": True, "d_per_channel": True}),
    ("mamba2_chunk_scan", {**MAMBA2, "seq_idx": True}),
    ("mamba2_chunk_scan", {**MAMBA2, "cb_in_tile": True, "seq_idx": True}),
    ("mamba2_chunk_state", {**MAMBA2, "seq_idx": True}),
    ("mamba2_chunk_state", {**MAMBA2, "pass_states": True, "seq_idx": True}),
]
#: Rendered schedules per workload: sampled, so tensor maps and plain pointers both occur.
SCHEDULES = 3


def _row(tensor: TensorSpec, dtype: str | None = None) -> tuple[Any, ...]:
    return (tensor.name, tensor.shape, dtype or tensor.dtype, tensor.role)


def _jobs(op: str, params: dict[str, Any]) -> list[Job]:
    """The service's jobs of rendered kernels, as a worker receives them (through JSON)."""
    spec = parse_spec(op, params)
    workload = {"op": op, "params": spec.params()}
    jobs = [kernel_job(sprogram, spec, DEVICE, workload, 0, FINAL_TIMING)
            for sprogram in sample_schedules(spec, DEVICE, SCHEDULES)]
    return [Job.from_dict(json.loads(json.dumps(job.to_dict()))) for job in jobs]


def _extent_bytes(arg: TensorMapArg) -> int:
    """The bytes a tensor map spans from its base address."""
    return arg.global_dims[0] * itemsize(arg.dtype) + sum(
        (d - 1) * s for d, s in zip(arg.global_dims[1:], arg.global_strides_bytes, strict=True))


def test_every_operator_with_code_generation_is_covered() -> None:
    from codegen import has_renderer

    assert {op for op, _ in CASES} == {op for op in OPERATORS if has_renderer(op)}


@pytest.mark.parametrize(("op", "params"), CASES, ids=[f"{op}-{i}" for i, (op, _) in
                                                       enumerate(CASES)])
def test_worker_load_and_artifact_read_one_contract(op: str, params: dict[str, Any]) -> None:
    spec_tensors = parse_spec(op, params).tensors()
    for job in _jobs(op, params):
        artifact = job.artifact
        assert artifact is not None
        # The worker's contract: the one the job carries, the spec's; without it, the same.
        worker = contract(op, params, job.tensors)
        assert list(worker.values()) == spec_tensors
        assert contract(op, params) == worker
        dtypes = check_tensor_args(op, params, artifact.args, job.tensors)

        # load's contract: the same tensors, each in the dtype the kernel takes it in.
        expected = load(artifact).expected
        assert [_row(t) for t in expected] == [_row(t, dtypes[t.name]) for t in worker.values()]

        # The artifact's arguments: pointers and tensor maps over the contract's tensors.
        named = set()
        for arg in artifact.args:
            if isinstance(arg, TensorArg):
                tensor = worker[arg.name]
                assert (arg.name, tuple(arg.shape), arg.dtype, arg.role) == _row(
                    tensor, dtypes[arg.name]), job.label
                named.add(arg.name)
            elif isinstance(arg, TensorMapArg):
                tensor = worker[arg.tensor].in_dtype(arg.dtype)
                assert arg.dtype == dtypes[arg.tensor], (arg.name, job.label)
                assert _extent_bytes(arg) <= tensor.size_bytes, (arg.name, job.label)
                named.add(arg.tensor)
        assert named == set(worker), job.label  # every tensor reaches the kernel

        # The inputs the worker draws: every input of the contract, its shape and dtype.
        inputs = build_inputs(np, op, params, dtypes, job.seed, job.tensors)
        assert list(inputs) == [n for n, t in worker.items() if t.role == "input"]
        for name, array in inputs.items():
            assert array.shape == worker[name].shape
            assert array.dtype == storage_dtype(np, dtypes[name])


@pytest.mark.parametrize("op", sorted(OPERATORS))
def test_baseline_jobs_carry_the_contract(op: str) -> None:
    params = dict(next(p for o, p in CASES if o == op))
    workload = {"op": op, "params": parse_spec(op, params).params()}
    job = baseline_job("peer", workload, seed=3)
    assert job.tensors == tuple(parse_spec(op, params).tensors())
    assert Job.from_dict(json.loads(json.dumps(job.to_dict()))) == job


def test_a_job_without_a_contract_is_read_from_its_workload() -> None:
    """Older jobs and bench scripts: the worker derives the spec's contract."""
    workload = {"op": "gemm", "params": {"m": 64, "n": 32, "k": 16, "dtype": "float16"}}
    job = Job.from_dict({k: v for k, v in Job(workload, baseline="cublas").to_dict().items()
                         if k != "tensors"})
    assert job.tensors is None
    assert list(contract("gemm", workload["params"], job.tensors).values()) == (
        workload_tensors("gemm", workload["params"]))


def test_one_packer_lays_out_pointers_scalars_and_tensor_maps_in_order() -> None:
    artifact = _jobs("gemm", CASES[0][1])[0].artifact
    assert isinstance(artifact, KernelArtifact)
    extra = ScalarArg("k", "int32", 128)
    args = (*artifact.args, extra)
    pointers = {name: 0x7F0000000000 + 0x100000 * i for i, name in enumerate("abc")}
    encoded: list[tuple[str, int]] = []

    def encode(arg: TensorMapArg, pointer: int) -> np.ndarray:
        encoded.append((arg.name, pointer))
        return np.full(16, pointer, dtype=np.uint64)

    packed = pack_arguments(args, pointers, encode)
    assert len(packed.values) == len(args)
    for arg, value in zip(args, packed.values, strict=True):
        if isinstance(arg, TensorArg):
            assert value == np.uint64(pointers[arg.name]) and isinstance(value, np.uint64)
        elif isinstance(arg, ScalarArg):
            assert value == np.int32(128) and isinstance(value, np.int32)
        else:
            assert (arg.name, pointers[arg.tensor]) in encoded
    assert len(encoded) == sum(isinstance(a, TensorMapArg) for a in args)


def _with_workspace(workspace: WorkspaceArg) -> KernelArtifact:
    artifact = _jobs("gemm", CASES[0][1])[0].artifact
    assert artifact is not None
    return dataclasses.replace(artifact, args=(*artifact.args, workspace))


def test_a_workspace_is_not_a_tensor_of_the_contract() -> None:
    artifact = _with_workspace(WorkspaceArg("tile_counters", 32 << 20))
    op, params = artifact.op, artifact.params
    plain = tuple(a for a in artifact.args if not isinstance(a, WorkspaceArg))
    assert check_tensor_args(op, params, artifact.args) == check_tensor_args(op, params, plain)
    assert [_row(t) for t in load(artifact).expected] == [
        _row(t) for t in load(dataclasses.replace(artifact, args=plain)).expected]


@pytest.mark.parametrize(("workspace", "message"), [
    (WorkspaceArg("tile_counters", 0), "workspace 'tile_counters' has 0 bytes"),
    (WorkspaceArg("tile_counters", -8), "workspace 'tile_counters' has -8 bytes"),
    (WorkspaceArg("c", 64), "workspace 'c' has the name of a tensor of the gemm contract"),
])
def test_a_workspace_needs_a_size_and_a_name_of_its_own(workspace: WorkspaceArg,
                                                         message: str) -> None:
    artifact = _with_workspace(workspace)
    with pytest.raises(ValueError, match=message):
        check_tensor_args(artifact.op, artifact.params, artifact.args)
    with pytest.raises(ValueError, match=message):
        load(artifact)
