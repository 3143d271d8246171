"""Times one decode step of mlx-lm's own model code over its KV cache, at
batch 1 and 8 after prompts of about 128 tokens, and counts the primitives
the step evaluates (each a kernel launch on a GPU): the peer's side of
model/llama's BenchmarkDecodeStep, on the same checkpoint.

    python3 scripts/mlxlm_decode_step.py CHECKPOINT_DIR [--steps 50] [--rows 1,8]
"""

import argparse
import io
import re
import time

import mlx.core as mx
from mlx_lm import load
from mlx_lm.models.cache import make_prompt_cache


def primitives(out):
    """Primitive counts by name, from MLX's DOT export of the graph."""
    buf = io.StringIO()
    mx.export_to_dot(buf, out)
    counts = {}
    for line in buf.getvalue().splitlines():
        # Primitive nodes are boxes labelled with the primitive's name.
        m = re.search(r'label\s*=\s*"([^"]+)",\s*shape=rectangle', line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--rows", default="1,8", help="batch sizes, comma-separated")
    args = ap.parse_args()
    model, _ = load(args.checkpoint)
    for rows in (int(r) for r in args.rows.split(",")):
        cache = make_prompt_cache(model)
        prompt = mx.array([[100 + (i * 7 + r) % 1000 for i in range(120)] for r in range(rows)])
        ids = mx.argmax(model(prompt, cache=cache)[:, -1, :], axis=-1)
        mx.eval(ids)
        out = mx.argmax(model(ids[:, None], cache=cache)[:, -1, :], axis=-1)
        counts = primitives(out)
        mx.eval(out)
        ids = out
        t0 = time.perf_counter()
        for _ in range(args.steps):
            ids = mx.argmax(model(ids[:, None], cache=cache)[:, -1, :], axis=-1)
            mx.eval(ids)
        ms = (time.perf_counter() - t0) / args.steps * 1e3
        detail = " ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        print(f"mlx-lm rows{rows}: {ms:.2f} ms/step, {sum(counts.values())} primitives/step: {detail}")


if __name__ == "__main__":
    main()
