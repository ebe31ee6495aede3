"""Kernels by artifact hash: the KernelArtifact JSON and its CUDA source.

Every run of an operator with a code generator stores the kernel of its best schedule
(on a simulated device rendered, never run); its hash is the run's ``best.kernel_hash``
and the cached schedule's ``kernel_hash``. The artifact is the whole launch contract:
``workers.load(body)`` runs it on CuPy arrays or torch tensors. A kernel's content never
changes under its hash, so its JSON is built once and kept (the most recent few hundred).
"""

from __future__ import annotations

import io
import zipfile
from functools import lru_cache
from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import PlainTextResponse, Response

from codegen.artifact import KernelArtifact
from codegen.export import export_files
from service.api.deps import DatabaseDep
from service.core.db import Database
from service.db import repositories as repo
from service.db.models import KernelModel
from service.errors import NotFound
from service.schemas import ErrorPublic, KernelArtifactPublic

router = APIRouter(prefix="/kernels", tags=["kernels"])

KernelHash = Annotated[str, Path(pattern=r"^[0-9a-f]{64}$", description="sha256, hex.")]
_NOT_FOUND = {404: {"model": ErrorPublic, "description": "No such kernel."}}


def _kernel(db: DatabaseDep, kernel_hash: str) -> KernelModel:
    """The kernel's row, read in a session of its own (the connection goes back to the
    pool before the answer is built)."""
    with repo.session_scope(db.read_sessions) as session:
        row = repo.get_kernel(session, kernel_hash=kernel_hash)
    if row is None:
        raise NotFound(f"kernel {kernel_hash} not found")
    return row


@lru_cache(maxsize=256)
def _artifact_json(db: Database, kernel_hash: str) -> bytes:
    """The kernel's answer as JSON bytes (a miss raises NotFound and is not kept)."""
    return KernelArtifactPublic.of(_kernel(db, kernel_hash)).model_dump_json().encode()


@router.get("/{kernel_hash}", response_model=KernelArtifactPublic, responses=_NOT_FOUND)
def get_kernel(db: DatabaseDep, kernel_hash: KernelHash) -> Response:
    """The KernelArtifact: source, entry, grid, block, shared memory, arguments; enough to
    run it with ``workers.load``."""
    return Response(_artifact_json(db, kernel_hash), media_type="application/json")


@router.get(
    "/{kernel_hash}/source",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}}, **_NOT_FOUND},
)
def get_kernel_source(db: DatabaseDep, kernel_hash: KernelHash) -> PlainTextResponse:
    """The kernel's ``.cu`` source text."""
    return PlainTextResponse(_kernel(db, kernel_hash).source)


@router.get(
    "/{kernel_hash}/export",
    response_class=Response,
    responses={200: {"content": {"application/zip": {}}}, **_NOT_FOUND},
)
def get_kernel_export(db: DatabaseDep, kernel_hash: KernelHash) -> Response:
    """The kernel as plain CUDA C++ (a zip): the kernel, a header with one host launch
    function, its implementation, an example and its nvcc line."""
    artifact = KernelArtifact.from_dict(dict(_kernel(db, kernel_hash).artifact))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in export_files(artifact).items():
            archive.writestr(f"{artifact.op}-{kernel_hash[:12]}/{name}", text)
    return Response(buffer.getvalue(), media_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="{artifact.op}-{kernel_hash[:12]}.zip"'})
