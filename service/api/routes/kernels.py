"""Kernels by artifact hash: the KernelArtifact JSON and its CUDA source.

Code generation does not exist yet, so no run stores a kernel and both routes answer 404
for every hash; they are here so clients can be written against the final API.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import PlainTextResponse

from service.api.deps import SessionDep
from service.db import repositories as repo
from service.db.models import KernelModel
from service.errors import NotFound
from service.schemas import ErrorPublic, KernelArtifactPublic

router = APIRouter(prefix="/kernels", tags=["kernels"])

KernelHash = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="sha256, hex.")]
_NOT_FOUND = {404: {"model": ErrorPublic, "description": "No such kernel."}}


def _kernel(session: SessionDep, kernel_hash: str) -> KernelModel:
    row = repo.get_kernel(session, kernel_hash=kernel_hash)
    if row is None:
        raise NotFound(f"kernel {kernel_hash} not found (no kernel is generated yet)")
    return row


@router.get("/{kernel_hash}", response_model=KernelArtifactPublic, responses=_NOT_FOUND)
def get_kernel(session: SessionDep, kernel_hash: KernelHash) -> KernelArtifactPublic:
    """The KernelArtifact: source, entry, grid, block, shared memory, arguments."""
    return KernelArtifactPublic.of(_kernel(session, kernel_hash))


@router.get(
    "/{kernel_hash}/source",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}}, **_NOT_FOUND},
)
def get_kernel_source(session: SessionDep, kernel_hash: KernelHash) -> PlainTextResponse:
    """The kernel's ``.cu`` source text."""
    return PlainTextResponse(_kernel(session, kernel_hash).source)
