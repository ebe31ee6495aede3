"""Where a generated attention backward kernel goes wrong, on one GPU: dq, dk and dv of
sampled schedules each against PyTorch's fp32 autograd of the same inputs, launched twice
(the second launch finds the workspace the first left), with the 64-row blocks whose
error exceeds 5% of the gradient's largest value.

The workers' check (tests/codegen/test_attention_backward_gpu.py) says whether a kernel is
right; this says which gradient and which rows are not, to debug one that is not.

    PYTHONPATH=. python3 bench/attention_backward_check.py --out /tmp/backward-check.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

#: (batch, heads, kv_heads, seq_q, seq_kv, head_dim, layout, causal, dtype): small first.
SHAPES = (
    (1, 2, 2, 128, 128, 64, "bshd", False, "float16"),
    (1, 8, 8, 256, 256, 64, "bshd", True, "float16"),
    (2, 4, 4, 1024, 1024, 64, "bshd", False, "float16"),
    (1, 8, 2, 512, 512, 128, "bshd", True, "bfloat16"),
    (2, 4, 1, 300, 700, 64, "bhsd", False, "bfloat16"),
)
BAD_BLOCK_SHARE = 0.05


def reference(torch: Any, q: Any, k: Any, v: Any, do: Any, causal: bool,
              heads_second: bool) -> tuple[Any, Any, list[Any]]:
    """o (the kernel's dtype), lse (fp32) and [dq, dk, dv] in fp32, in the inputs' layout."""
    if not heads_second:
        q, k, v, do = (x.transpose(1, 2) for x in (q, k, v, do))
    q32, k32, v32 = (x.float().requires_grad_(True) for x in (q, k, v))
    group = q.shape[1] // k.shape[1]
    scores = (q32 @ k32.repeat_interleave(group, 1).transpose(-1, -2)
              / math.sqrt(q.shape[-1]))
    if causal:
        above = torch.ones(scores.shape[-2:], device=scores.device, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(above, float("-inf"))
    o = torch.softmax(scores, -1) @ v32.repeat_interleave(group, 1)
    o.backward(do.float())
    grads = [q32.grad, k32.grad, v32.grad]
    lse = torch.logsumexp(scores, -1).detach().contiguous()
    o = o.detach().to(q.dtype)
    if not heads_second:
        grads, o = [g.transpose(1, 2) for g in grads], o.transpose(1, 2)
    return o.contiguous(), lse, grads


def compare(got: Any, expected: Any, heads_second: bool) -> dict[str, Any]:
    """Relative L2 error, and the 64-row blocks (of the sequence) that are off."""
    error = (got.float() - expected).norm() / expected.norm()
    rows = (got.float() - expected).abs().amax(dim=-1)  # (b, s, h) or (b, h, s)
    rows = rows.amax(dim=(0, 1) if heads_second else (0, 2))
    limit = BAD_BLOCK_SHARE * expected.abs().max()
    bad = [start for start in range(0, rows.shape[0], 64) if rows[start:start + 64].max() > limit]
    return {"rel_error": float(error), "bad_blocks_from": bad[:16]}


def check_shape(torch: Any, shape: tuple, samples: int) -> list[dict[str, Any]]:
    from schedule_samples import sample_schedules

    from codegen import render
    from scheduler_search.hardware import get_device
    from scheduler_search.ops import parse_spec
    from workers import load

    batch, heads, kv_heads, seq_q, seq_kv, d, layout, causal, dtype = shape
    spec = parse_spec("attention_backward", dict(
        batch=batch, heads=heads, kv_heads=kv_heads, seq_q=seq_q, seq_kv=seq_kv, head_dim=d,
        layout=layout, causal=causal, dtype=dtype))
    heads_second = layout == "bhsd"
    generator = torch.Generator(device="cuda").manual_seed(1)

    def draw(h: int, s: int) -> Any:
        size = (batch, h, s, d) if heads_second else (batch, s, h, d)
        return torch.randn(size, generator=generator, device="cuda").to(getattr(torch, dtype))

    q, k, v, do = draw(heads, seq_q), draw(kv_heads, seq_kv), draw(kv_heads, seq_kv), \
        draw(heads, seq_q)
    o, lse, expected = reference(torch, q, k, v, do, causal, heads_second)
    device = get_device("h200")
    records = []
    for sprogram in sample_schedules(spec, device, samples, seed=7):
        record: dict[str, Any] = {"shape": shape, "choices": sprogram.choices}
        try:
            kernel = load(render(sprogram, spec, device))
            for launch in ("first", "second"):
                grads = kernel(q, k, v, o, lse, do)
                torch.cuda.synchronize()
                record[launch] = {name: compare(g, e, heads_second) for name, g, e in
                                  zip(("dq", "dk", "dv"), grads, expected, strict=True)}
        except Exception:  # a broken kernel is a finding, not a stop
            record["error"] = traceback.format_exc()[-1500:]
        print(json.dumps(record, default=str), flush=True)
        records.append(record)
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3, help="schedules per shape")
    parser.add_argument("--out", default="/tmp/backward-check.json")
    args = parser.parse_args(argv)
    import torch

    records = [r for shape in SHAPES for r in check_shape(torch, shape, args.samples)]
    Path(args.out).write_text(json.dumps(records, indent=1, default=str))


if __name__ == "__main__":
    main()
