"""A target owns one architecture's compile options (NVRTC's, nvcc's and the exported
kernel's build line all come from it, so no other module of code generation spells them)
and is found by the schedule's architecture."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from codegen import render
from codegen.export import build_line, export_files
from codegen.nvcc import NVCC_ARCH
from codegen.targets import HOPPER, Target, target_for
from scheduler_search.hardware import get_device
from scheduler_search.ops import parse_spec
from scheduler_search.space.designs import GEMM_WARP_SPECIALIZED
from scheduler_search.sprogram import plan_sprogram

CODEGEN = Path(__file__).resolve().parents[2] / "codegen"


def test_a_target_writes_its_compile_options_from_its_architecture() -> None:
    target = replace(HOPPER, arch="sm_80")
    assert target.compile_options == ("-std=c++17", "-arch=sm_80")
    assert target.nvcc_arch == ("-gencode=arch=compute_80,code=sm_80",)
    assert target.nvcc_build_line("app", "a.cu") == (
        "nvcc -gencode=arch=compute_80,code=sm_80 -std=c++17 -o app a.cu -lcuda")


def test_hopper_kernels_nvcc_and_the_export_take_the_hopper_target() -> None:
    spec = parse_spec("gemm", {"m": 256, "n": 256, "k": 256, "dtype": "float16"})
    device = get_device("h200")
    artifact = render(plan_sprogram(spec, device, GEMM_WARP_SPECIALIZED), spec, device)
    assert artifact.compile_options == HOPPER.compile_options == ("-std=c++17", "-arch=sm_90a")
    assert HOPPER.nvcc_arch == NVCC_ARCH
    assert build_line(artifact).startswith("nvcc -gencode=arch=compute_90a,code=sm_90a -std=c++17 ")
    assert export_files(artifact)["BUILD.txt"].startswith("Needs an sm_90a GPU")


def test_an_export_names_the_architecture_its_kernel_was_built_for() -> None:
    spec = parse_spec("gemm", {"m": 256, "n": 256, "k": 256, "dtype": "float16"})
    device = get_device("h200")
    artifact = render(plan_sprogram(spec, device, GEMM_WARP_SPECIALIZED), spec, device)
    for options, says in ((("-std=c++17", "-arch=sm_100a"),
                           "no code generation target for sm_100a"),
                          (("-std=c++17",), "names no architecture")):
        with pytest.raises(ValueError, match=says):
            export_files(replace(artifact, compile_options=options))


def test_no_module_outside_the_targets_spells_a_compile_option() -> None:
    option = re.compile(r"-arch=sm_|compute_\d+a?,code=")
    spelled = [path.relative_to(CODEGEN).as_posix() for path in CODEGEN.rglob("*.py")
               if "targets" not in path.parts and option.search(path.read_text())]
    assert spelled == []


def test_only_the_hopper_target_names_hopper_s_instructions() -> None:
    hopper = re.compile(r"wgmma|sm_90a")
    spelled = [path.relative_to(CODEGEN).as_posix() for path in CODEGEN.rglob("*.py")
               if path.parent.name != "hopper" and hopper.search(path.read_text())]
    assert spelled == []


def test_a_device_the_target_cannot_run_on_is_tuned_on_the_simulated_device() -> None:
    from codegen import feasibility
    from scheduler_search.hardware.model import Capabilities

    h200 = get_device("h200")
    assert HOPPER.runs_on(h200) and feasibility("gemm", h200) is not None
    no_wgmma = replace(h200, capabilities=Capabilities(tma=True, wgmma=False))
    assert feasibility("gemm", no_wgmma) is None
    assert feasibility("gemm", replace(h200, arch="sm_100a")) is None  # no target for it


def test_a_kernel_s_target_is_its_schedule_s_architecture() -> None:
    assert target_for("sm_90a") is HOPPER and isinstance(HOPPER, Target)
    assert target_for("sm_80").mma_name == "mma.sync"
    with pytest.raises(ValueError, match="sm_100a"):
        target_for("sm_100a")


def test_the_operators_ask_the_target_for_its_mma_geometry_and_operand_fences() -> None:
    """An MMA's row block, its k step per input type and the fence that keeps register
    operands in place come from the target (Hopper: 64-row blocks, k16 for 16-bit inputs
    and k32 for 8-bit floats), and no operator imports the Hopper primitives for them."""
    from codegen.pipeline.code import Code

    assert HOPPER.mma_rows == 64
    assert (HOPPER.k_step("bfloat16"), HOPPER.k_step("float8_e4m3")) == (16, 32)
    code = Code()
    HOPPER.write_fence_operands(code, "acc[mi]")
    assert "wgmma_fence_operands(acc[mi]);" in code.text()
    operators = [*CODEGEN.glob("kernels/**/*.py"), CODEGEN / "pipeline" / "hooks.py",
                 CODEGEN / "pipeline" / "layout.py"]
    for path in operators:
        text = path.read_text()
        assert "call(\"wgmma_fence_operands\"" not in text and "WGMMA_M" not in text, path
