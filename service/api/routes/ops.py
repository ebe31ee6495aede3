"""``GET /v1/ops``: the operators a tune may name, each with its parameters' JSON schema
(types, ranges, defaults), its vendor baseline and whether CUDA is generated for it, so
a client learns what ``params`` takes without reading the source; a pipeline
(``mamba2_ssd``) also lists the operators of the kernels it runs."""

from __future__ import annotations

from functools import cache

from fastapi import APIRouter

from codegen import has_renderer
from scheduler_search.ops import OPERATORS, PIPELINES
from service.schemas import OperatorPublic, OperatorsPublic

router = APIRouter(prefix="/ops", tags=["ops"])


@router.get("", response_model=OperatorsPublic)
async def list_operators() -> OperatorsPublic:
    """Every operator, with the JSON schema of its ``params``."""
    return _operators()


@cache
def _operators() -> OperatorsPublic:
    """Built once: a JSON schema takes milliseconds to generate, and never changes."""
    data = []
    for op, spec_class in sorted(OPERATORS.items()):
        schema = spec_class.model_json_schema()
        data.append(OperatorPublic(
            op=op,
            summary=(spec_class.__doc__ or "").strip().splitlines()[0],
            parameters=schema,
            required=list(schema.get("required", [])),
            baseline=spec_class.baseline,
            peers=list(spec_class.peers),
            generates_cuda=has_renderer(op),
        ))
    for op, pipeline_class in sorted(PIPELINES.items()):
        schema = pipeline_class.model_json_schema()
        kernel_ops = sorted(pipeline_class.kernel_ops)
        data.append(OperatorPublic(
            op=op,
            summary=(pipeline_class.__doc__ or "").strip().splitlines()[0],
            parameters=schema,
            required=list(schema.get("required", [])),
            baseline=None,
            peers=[],
            generates_cuda=all(has_renderer(kernel_op) for kernel_op in kernel_ops),
            kernels=kernel_ops,
        ))
    data.sort(key=lambda item: item.op)
    return OperatorsPublic(data=data, count=len(data))

