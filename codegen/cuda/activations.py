"""Activations of fused epilogues, on fp32 values in registers (CUDA-core math).

``gelu`` is the exact GELU, ``0.5 x (1 + erf(x / sqrt 2))`` (PyTorch's default);
``gelu_tanh`` its tanh form, ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`` (PyTorch's
``approximate="tanh"``, cuBLASLt's GELU); ``silu`` is ``x sigmoid(x)``. ``erff``, ``tanhf``
and ``__expf`` are CUDA's device math functions, built into NVRTC (CUDA C++ Programming
Guide, "Mathematical Functions").
"""

from __future__ import annotations

from codegen.cuda._snippet import Snippet, register

_ACTIVATIONS = {
    "relu": "return fmaxf(x, 0.0f);",
    "gelu": "return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));",
    "gelu_tanh": ("const float inner = 0.79788456080286536f * fmaf(0.044715f * x * x, x, x);\n"
                  "  return 0.5f * x * (1.0f + tanhf(inner));"),
    "silu": "return x / (1.0f + __expf(-x));",
}

register(*(Snippet(f"act_{name}",
                   f"__device__ __forceinline__ float act_{name}(float x) {{\n  {body}\n}}\n")
           for name, body in _ACTIVATIONS.items()))


def activation(name: str) -> str | None:
    """The snippet applying activation ``name`` (None for ``none``)."""
    if name == "none":
        return None
    if name not in _ACTIVATIONS:
        raise KeyError(f"no activation {name!r}; known: none, {', '.join(_ACTIVATIONS)}")
    return f"act_{name}"
