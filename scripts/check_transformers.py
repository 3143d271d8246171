#!/usr/bin/env python3
"""Check our forward pass against HF transformers on the tiny checkpoints.

Our side is committed under testdata/ref/transformers/: for each checkpoint
an index NAME.json and NAME.logits.f32, written by

    go run ./scripts/dumplogits -model DIR -prompts DIR/fixture.json -out testdata/ref/transformers/NAME.json

(the prompts, our greedy tokens, and our float32 logits of every step,
[prompt, step, vocab]; step k is the distribution generated token k was
chosen from). This script needs no Go: python3 with torch, transformers,
safetensors and numpy.

Per checkpoint it loads the directory with transformers
(AutoModelForCausalLM, float32, eager attention and eager experts, on CUDA
when there is one, else the CPU; TF32 off) and

  * teacher-forced: one forward over the prompt followed by our greedy
    tokens; the logits at the positions that chose each of our tokens are
    compared with ours over the whole vocabulary (max |ours - transformers|)
    and transformers' argmax there must be our token;
  * free-running: transformers' own greedy decoding through its KV cache
    (prefill, then one token a step, end tokens fed back like any other, as
    ours does), whose tokens must equal ours; its logits are compared as
    well, up to the first step where the tokens differ.

A checkpoint fails when a logit differs by more than --tol (default 1e-3)
or any token differs, or when transformers leaves a weight of the
checkpoint unloaded. Both sides compute in float32 and differ only in the
order of float operations: with transformers 5.17 and torch 2.11 the
largest difference measured was 6.3e-5 on CUDA and 3.8e-5 on the CPU
(logits spread over about +-10), so 1e-3 leaves room for other kernels
while a real divergence (a mask one token off, a wrong scale) shows up far
above it. The smallest top-1 minus top-2 margin of each side is reported
(3.7e-4 for gemma4_tiny_ple, at least 9.8e-3 elsewhere), so that a token
mismatch at a near-tie can be told from a bug.

gpt-oss's MXFP4 experts are loaded through transformers' own
dequantization (Mxfp4Config(dequantize=True)), not its Triton kernels,
which compute in lower precision; transformers 5.17 dequantizes to
bfloat16, which is exact for FP4 values times powers of two, and the script
casts them to float32. If transformers cannot load that checkpoint at all,
it is reported as skipped. The committed config.json files load unpatched.

Exit status 0 when every checkpoint that ran passed, 1 otherwise. Usage,
from the repository root:

    python3 scripts/check_transformers.py --out OUT.json
"""

import argparse
import json
import math
import pathlib
import platform
import sys
import traceback

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
DUMPS = ROOT / "testdata" / "ref" / "transformers"
CHECKPOINTS = ["gptoss_tiny_hf_bf16", "gptoss_tiny_hf_mxfp4", "gemma4_tiny_moe", "gemma4_tiny_ple"]
TOL = 1e-3


def read_dump(name, dumps):
    """Our index and logits [prompt, step, vocab] for one checkpoint."""
    ix = json.loads((dumps / f"{name}.json").read_text())
    logits = np.fromfile(dumps / ix["logits"], dtype="<f4").reshape(ix["shape"])
    return ix, logits


def is_mxfp4(model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    return (cfg.get("quantization_config") or {}).get("quant_method") == "mxfp4"


def load(model_dir, device):
    """The checkpoint as a float32 transformers model, and notes on how."""
    kwargs = {"dtype": torch.float32, "attn_implementation": "eager", "experts_implementation": "eager"}
    notes = []
    if is_mxfp4(model_dir):
        from transformers import Mxfp4Config

        kwargs["quantization_config"] = Mxfp4Config(dequantize=True)
        notes.append("MXFP4 experts dequantized by transformers (Mxfp4Config(dequantize=True))")
    model, info = AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True, **kwargs)
    notes.append(f"class {type(model).__name__}")
    experts = sorted({type(m).__name__ for n, m in model.named_modules() if n.endswith("experts")})
    if experts:
        notes.append("experts " + ", ".join(experts))
    # Some transformers versions dequantize MXFP4 to bfloat16 whatever the
    # requested dtype. An FP4 value times a power of two is exact in
    # bfloat16 and in float32, so the cast loses nothing.
    other = {n: p.dtype for n, p in model.named_parameters() if p.is_floating_point() and p.dtype != torch.float32}
    if other:
        kinds = ", ".join(sorted({str(d) for d in other.values()}))
        notes.append(f"{len(other)} parameters loaded as {kinds} (e.g. {min(other)}), cast to float32")
        model.float()
    model.to(device).eval()
    return model, info, notes


def margin(row):
    """Top-1 minus top-2 of a logit vector."""
    top = np.sort(row.astype(np.float64))[-2:]
    return float(top[1] - top[0])


@torch.no_grad()
def forward_logits(model, ids, device, past=None):
    """Logits [len(ids), vocab] of one forward, float32 on the host, and the cache."""
    out = model(input_ids=torch.tensor([ids], dtype=torch.long, device=device), past_key_values=past, use_cache=True)
    return out.logits[0].float().cpu().numpy(), out.past_key_values


def free_running(model, prompt, steps, device):
    """Transformers' greedy decoding through its own cache: tokens and logits."""
    tokens, rows = [], []
    logits, past = forward_logits(model, prompt, device)
    for _ in range(steps):
        row = logits[-1]
        tok = int(np.argmax(row))
        tokens.append(tok)
        rows.append(row)
        if len(tokens) < steps:
            logits, past = forward_logits(model, [tok], device, past)
    return tokens, np.stack(rows)


def check(name, dumps, device, tol):
    ix, ours = read_dump(name, dumps)
    model_dir = ROOT / ix["model"]
    res = {"name": name, "model": ix["model"], "arch": ix["arch"], "tolerance": tol}
    try:
        model, info, notes = load(model_dir, device)
    except Exception as err:  # noqa: BLE001 - reported per checkpoint
        if is_mxfp4(model_dir):
            res.update(status="skipped", message=f"transformers cannot load the MXFP4 checkpoint: {err!r}")
        else:
            res.update(status="error", message=f"load failed: {err!r}", traceback=traceback.format_exc())
        return res
    res["notes"] = notes
    missing = sorted(info.get("missing_keys") or [])
    unexpected = sorted(info.get("unexpected_keys") or [])
    mismatched = [str(m) for m in info.get("mismatched_keys") or []]
    res["loading"] = {"missing_keys": missing, "unexpected_keys": unexpected, "mismatched_keys": mismatched}
    problems = []
    if missing or mismatched:
        problems.append(f"weights not loaded from the checkpoint: missing {missing}, mismatched {mismatched}")
    if unexpected:
        problems.append(f"checkpoint tensors transformers ignored: {unexpected}")

    vocab = ours.shape[2]
    forced_worst, forced_at = 0.0, None
    free_worst = 0.0
    token_mismatches = []
    free_runs = []
    min_margin_ours = math.inf
    min_margin_theirs = math.inf
    for pi, p in enumerate(ix["prompts"]):
        prompt, toks = p["prompt_tokens"], p["tokens"]
        steps = len(toks)
        seq = prompt + toks[:-1]
        logits, _ = forward_logits(model, seq, device)
        if logits.shape[1] < vocab:
            raise ValueError(f"{name}: transformers gives {logits.shape[1]} logits, ours {vocab}")
        theirs = logits[len(prompt) - 1 : len(prompt) - 1 + steps, :vocab]
        diff = np.abs(theirs.astype(np.float64) - ours[pi].astype(np.float64))
        diff[np.isnan(diff)] = math.inf
        s, t = np.unravel_index(int(np.argmax(diff)), diff.shape)
        if diff[s, t] >= forced_worst:
            forced_worst, forced_at = float(diff[s, t]), {"prompt": pi, "step": int(s), "token": int(t)}
        for s in range(steps):
            mo, mt = margin(ours[pi, s]), margin(theirs[s])
            min_margin_ours = min(min_margin_ours, mo)
            min_margin_theirs = min(min_margin_theirs, mt)
            got = int(np.argmax(theirs[s]))
            if got != toks[s]:
                token_mismatches.append(
                    {"prompt": pi, "step": s, "ours": toks[s], "transformers": got, "margin_ours": mo, "margin_transformers": mt}
                )

        free_toks, free_logits = free_running(model, prompt, steps, device)
        agree = next((s for s in range(steps) if free_toks[s] != toks[s]), steps)
        # Up to and including the first differing step both sides saw the
        # same tokens, so their logits are comparable there.
        same = min(agree + 1, steps)
        free_worst = max(free_worst, float(np.max(np.abs(free_logits[:same, :vocab] - ours[pi, :same]))))
        free_runs.append({"prompt": pi, "equal": agree == steps, "first_difference": None if agree == steps else agree,
                          "tokens": free_toks})

    res["positions"] = int(sum(len(p["tokens"]) for p in ix["prompts"]))
    res["max_abs_diff"] = forced_worst
    res["max_abs_diff_at"] = forced_at
    res["argmax_matches"] = not token_mismatches
    res["argmax_mismatches"] = token_mismatches
    res["min_margin_ours"] = min_margin_ours
    res["min_margin_transformers"] = min_margin_theirs
    res["free_running_equal"] = all(r["equal"] for r in free_runs)
    res["free_running"] = free_runs
    res["free_running_max_abs_diff"] = free_worst
    if forced_worst > tol:
        problems.append(f"teacher-forced max |diff| {forced_worst:.3g} > {tol:.3g} at {forced_at}")
    if free_worst > tol:
        problems.append(f"free-running max |diff| {free_worst:.3g} > {tol:.3g}")
    if token_mismatches:
        problems.append(f"{len(token_mismatches)} teacher-forced argmax mismatches, first {token_mismatches[0]}")
    if not res["free_running_equal"]:
        r = next(r for r in free_runs if not r["equal"])
        problems.append(f"free-running tokens differ: prompt {r['prompt']} from step {r['first_difference']}")
    res["status"] = "fail" if problems else "ok"
    res["problems"] = problems
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return res


def report(res):
    name = res["name"]
    if res["status"] in ("skipped", "error"):
        print(f"{name}: {res['status'].upper()}: {res['message']}")
        return
    for n in res["notes"]:
        print(f"{name}: {n}")
    print(f"{name}: {res['positions']} positions; max |ours - transformers| teacher-forced {res['max_abs_diff']:.3g} "
          f"(at {res['max_abs_diff_at']}), free-running {res['free_running_max_abs_diff']:.3g}; tolerance {res['tolerance']:.3g}")
    print(f"{name}: argmax equals our token at every position: {res['argmax_matches']}; "
          f"smallest top-2 margin: ours {res['min_margin_ours']:.3g}, transformers {res['min_margin_transformers']:.3g}")
    print(f"{name}: transformers' free-running greedy tokens equal ours: {res['free_running_equal']}")
    for p in res["problems"]:
        print(f"{name}: PROBLEM: {p}")
    print(f"{name}: {res['status'].upper()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=pathlib.Path, help="write the JSON summary here")
    ap.add_argument("--dumps", type=pathlib.Path, default=DUMPS, help="directory of our dumps (NAME.json, NAME.logits.f32)")
    ap.add_argument("--only", action="append", choices=CHECKPOINTS, help="check only this checkpoint (repeatable)")
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument("--tol", type=float, default=TOL, help="max |ours - transformers| per logit (float32)")
    args = ap.parse_args()

    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    # Float32 means float32: no TF32 in matrix products or convolutions.
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "numpy": np.__version__, "device": str(device)}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))

    results = []
    for name in args.only or CHECKPOINTS:
        try:
            res = check(name, args.dumps, device, args.tol)
        except Exception as err:  # noqa: BLE001 - one checkpoint's failure must not hide the others
            res = {"name": name, "status": "error", "message": repr(err), "traceback": traceback.format_exc()}
        report(res)
        results.append(res)

    failed = [r["name"] for r in results if r["status"] in ("fail", "error")]
    skipped = [r["name"] for r in results if r["status"] == "skipped"]
    summary = {"environment": env, "tolerance": args.tol, "passed": not failed, "failed": failed, "skipped": skipped,
               "checkpoints": results}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    verdict = "PASS" if not failed else "FAIL: " + ", ".join(failed)
    if skipped:
        verdict += " (skipped: " + ", ".join(skipped) + ")"
    print(verdict)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
