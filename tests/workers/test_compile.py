"""NVRTC options, cache keys and (where CuPy's NVRTC is installed) real compiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from workers.compile import (
    CUPY_IMPLICIT_OPTIONS,
    CompileResult,
    ParallelCompiler,
    compile_key,
    compile_to_cache,
    nvrtc_options,
)
from workers.testing import gemm_tiled_artifact, gemm_tma_artifact

PARAMS = {"m": 256, "n": 128, "k": 64, "dtype": "float16", "b_layout": "kn"}


def test_options_add_cupys_implicit_flags_and_a_default_arch() -> None:
    explicit = nvrtc_options(("-std=c++17", "-arch=sm_90a"), "90")
    assert explicit == ("-std=c++17", "-arch=sm_90a", *CUPY_IMPLICIT_OPTIONS)
    assert nvrtc_options(("-std=c++17",), "80") == (
        "-std=c++17",
        "-arch=sm_80",
        *CUPY_IMPLICIT_OPTIONS,
    )
    assert nvrtc_options(("-ftz=true",), "90").count("-ftz=true") == 1


def test_compile_key_depends_on_source_options_and_nvrtc() -> None:
    key = compile_key("src", ("-a",), (13, 0))
    assert key == compile_key("src", ("-a",), (13, 0))
    assert (
        len(
            {
                key,
                compile_key("src2", ("-a",), (13, 0)),
                compile_key("src", ("-b",), (13, 0)),
                compile_key("src", ("-a",), (13, 1)),
            }
        )
        == 4
    )


def test_compile_result_round_trips() -> None:
    result = CompileResult(ok=True, key="k", cubin_path="/x.cubin", log="", compile_ms=3.0)
    assert CompileResult.from_dict(result.to_dict()) == result


def _need_nvrtc() -> None:
    nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    try:
        nvrtc.getVersion()
    except Exception as exc:  # CuPy installed without an NVRTC library
        pytest.skip(f"NVRTC not loadable: {exc}")


def test_real_compile_is_cached_on_disk(tmp_path: Path) -> None:
    _need_nvrtc()
    artifact = gemm_tma_artifact(PARAMS)
    first = compile_to_cache(artifact.source, artifact.compile_options, str(tmp_path), "90")
    assert first.ok and not first.cached and first.compile_ms > 0
    assert (tmp_path / f"{first.key}.cubin").stat().st_size > 0
    second = compile_to_cache(artifact.source, artifact.compile_options, str(tmp_path), "90")
    assert second.cached and second.key == first.key and second.compile_ms == first.compile_ms


def test_batch_compiles_in_parallel_with_errors_in_place(tmp_path: Path) -> None:
    _need_nvrtc()
    good = gemm_tiled_artifact(PARAMS)
    broken = 'extern "C" __global__ void broken( { }'
    compiler = ParallelCompiler(cache_dir=tmp_path, max_workers=2)
    try:
        results = compiler.compile_many(
            [
                (good.source, good.compile_options),
                (broken, ()),
                (good.source, good.compile_options),
            ],
            default_arch="90",
        )
    finally:
        compiler.close()
    assert [r.ok for r in results] == [True, False, True]
    assert results[0] == results[2]  # one compile for a repeated source
    assert "error" in results[1].log and results[1].cubin_path is None


def test_warm_starts_every_pool_process_before_any_source(tmp_path: Path) -> None:
    compiler = ParallelCompiler(cache_dir=tmp_path, max_workers=2)
    try:
        assert compiler._processes == []
        compiler.warm()
        children = [p._child for p in compiler._processes]
        assert len(children) == 2 and all(c is not None and c.is_alive() for c in children)
        compiler.warm()  # again: the same processes
        assert [p._child for p in compiler._processes] == children
    finally:
        compiler.close()
    assert compiler._processes == []


def test_a_warm_up_and_a_compile_on_one_process_get_their_own_answers(tmp_path: Path) -> None:
    """The pool's warm-up (answered True) and a batch's compiles asked of the same cold
    process from two threads: each gets its own answer (interleaved on one pipe, a compile
    once read the warm-up's True: "'bool' object has no attribute 'ok'", H200 2026-12-04)."""
    import threading

    broken = 'extern "C" __global__ void broken( { }'
    compiler = ParallelCompiler(cache_dir=tmp_path, max_workers=1)
    try:
        for _ in range(5):
            results: list = []
            warming = threading.Thread(target=compiler.warm)
            warming.start()
            results = compiler.compile_many([(broken, ())], default_arch="90")
            warming.join()
            assert [type(r).__name__ for r in results] == ["CompileResult"]
            assert not results[0].ok
            compiler.close()  # cold again for the next round
    finally:
        compiler.close()
