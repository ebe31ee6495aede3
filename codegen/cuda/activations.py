"""Activations of fused epilogues, on fp32 values in registers (CUDA-core math).

``gelu`` is the exact GELU, ``0.5 x (1 + erf(x / sqrt 2))`` (PyTorch's default);
``gelu_tanh`` its tanh form, ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`` (PyTorch's
``approximate="tanh"``, cuBLASLt's GELU); ``silu`` is ``x sigmoid(x)``.

An epilogue runs its activation on every output element while the tensor cores of the
block wait, so each is written for few instructions: ``gelu_tanh`` as ``hx + hx tanh(u)``
(``hx = x / 2``) with one ``tanh.approx.f32`` (one MUFU.TANH; CUDA's ``tanhf`` compiled to
MUFU.EX2, MUFU.RCP and about 20 more instructions an element, ptxas 13.0), and ``silu`` as
``__fdividef(x, 1 + __expf(-x))`` (MUFU.EX2 and MUFU.RCP) instead of an IEEE division.
``erff``, ``__expf`` and ``__fdividef`` are CUDA's device functions and intrinsics, built into
NVRTC (CUDA C++ Programming Guide, "Mathematical Functions", "Intrinsic Functions").
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

#: tanh on the SFU. It sits here, not in ``sfu``, because the prelude emits snippets in
#: registration order and this module registers before ``sfu`` (moving ``sfu`` would
#: reorder every attention kernel's text).
TANH = Snippet(
    "tanh_approx",
    "// tanh(x) on the SFU (tanh.approx.f32, sm_75+): largest relative error 1.1e-5\n"
    "// (about 2^-16.5), measured over all floats (NVIDIA developer forums, 2021).\n"
    "__device__ __forceinline__ float tanh_approx(float x) {\n"
    "  float y;\n"
    '  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));\n'
    "  return y;\n"
    "}\n",
    section='9.7.3.22 "tanh"',
)

#: sqrt(2 / pi) and sqrt(2 / pi) · 0.044715: gelu_tanh's u = x (c0 + c1 x^2).
_GELU_C0, _GELU_C1 = "0.79788456080286536f", "0.035677408136300125f"

#: Activation -> (body on ``x``, snippets it calls).
_ACTIVATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "relu": ("return fmaxf(x, 0.0f);", ()),
    "gelu": ("return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));", ()),
    "gelu_tanh": (f"const float u = x * fmaf({_GELU_C1}, x * x, {_GELU_C0});\n"
                  "  const float hx = 0.5f * x;\n"
                  "  return fmaf(hx, tanh_approx(u), hx);", ("tanh_approx",)),
    # Below x = -88, __expf(-x) is +inf and __fdividef(x, inf) is -0, as x / inf is.
    "silu": ("return __fdividef(x, 1.0f + __expf(-x));", ()),
}

#: This family's place in a prelude (:func:`codegen.cuda._snippet.register`).
PRELUDE_RANK = 10

register(TANH, *(Snippet(f"act_{name}",
                         f"__device__ __forceinline__ float act_{name}(float x) {{\n  {body}\n}}\n",
                         requires=requires)
                 for name, (body, requires) in _ACTIVATIONS.items()), rank=PRELUDE_RANK)


def activation(name: str) -> str | None:
    """The snippet applying activation ``name`` (None for ``none``)."""
    if name == "none":
        return None
    if name not in _ACTIVATIONS:
        raise KeyError(f"no activation {name!r}; known: none, {', '.join(_ACTIVATIONS)}")
    return f"act_{name}"
