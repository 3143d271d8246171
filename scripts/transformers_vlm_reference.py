#!/usr/bin/env python3
"""Run HF transformers on the tiny VLM fixtures and compare its logits with theirs.

The inputs are what transformers' own processors make for each case,
saved by scripts/transformers_vlm_inputs.py (a folder of NAME.npz per
fixture and a manifest.json). This script needs torch, transformers and
numpy, no processor: per fixture it loads the checkpoint directory
(testdata/ref/gemma3_vlm_tiny/, testdata/ref/gemma4_vlm_tiny/) with the
manifest's class (Gemma3ForConditionalGeneration,
Gemma4ForConditionalGeneration), float32, eager attention, TF32 off, and
per device (CUDA when there is one, the CPU) and case runs one forward
over the saved inputs, model(**inputs), the case's config overrides
applied to the text config for that forward only, and compares the logits
at every position with the fixture's logits_<case>.f32:

    max_abs_diff            over every position and logit
    per_position            max |transformers - fixture| at each position
    regions                 the largest difference before the first
                            multimodal span, inside the spans, and after
                            them (text between spans counts as after)
    argmax                  positions where the two argmaxes agree, those
                            where they do not (with both sides' top-1
                            minus top-2 margin there), and the last
                            position's argmax against fixture.json's
    soft_tokens             the multimodal encoder's output for the case
                            (transformers' get_image_features /
                            get_video_features) against the fixture's
                            soft tokens (soft_tokens.f32,
                            soft_tokens_N.f32, video_soft_tokens_0.f32)
    with_fixture_soft_tokens
                            the same forward with the fixture's soft
                            tokens passed as the encoder's output
                            (mm_encoder_outputs) instead of the pixels:
                            the language model alone (masks, per-layer
                            inputs, placement), apart from the tower
    cuda_vs_cpu             max |CUDA - CPU| of the case's logits
    float64                 the same forwards in float64 (--float64, the
                            CPU by default) as the exact answer: per case
                            max |fixture - float64|, max |transformers
                            float32 - float64| per device, the fixture
                            against the float64 language model on the
                            fixture's soft tokens, and the soft tokens of
                            each side against float64's

and the versions (python, torch, transformers and where it was imported
from, numpy, CUDA, the GPU). Loading must use every checkpoint tensor and
leave no weight unset; a case passes when its max_abs_diff is within
--tol (default 1e-4) and every argmax agrees. Cases whose pixels are not
the fixture's (the manifest's same_pixels_as_fixture false: the
torchvision-backend variants) are reported with status "info" and not
held to the tolerance.

Usage, from the repository root:

    python3 scripts/transformers_vlm_reference.py --inputs DIR --out REPORT.json [--devices cuda,cpu]

Exit status 0 when every case passed, 1 otherwise.
"""

import argparse
import inspect
import json
import pathlib
import platform
import sys
import time
import traceback

import numpy as np
import torch
import transformers

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOL = 1e-4


def load_model(cls_name, directory, device):
    cls = getattr(transformers, cls_name)
    model, info = cls.from_pretrained(directory, dtype=torch.float32, attn_implementation="eager",
                                      output_loading_info=True)
    loading = {k: sorted(str(x) for x in (info.get(k) or [])) for k in ("missing_keys", "unexpected_keys",
                                                                         "mismatched_keys")}
    not_float32 = sorted(n for n, p in model.named_parameters() if p.dtype != torch.float32)
    attn = {"model": model.config._attn_implementation}
    for sub in ("text_config", "vision_config"):
        c = getattr(model.config, sub, None)
        if c is not None:
            attn[sub] = c._attn_implementation
    return model.to(device).eval(), loading, not_float32, attn


def fixture_soft_tokens(fixture_dir, fixture, case):
    """The fixture's soft tokens for the case's images or video, [tokens, hidden], or None."""
    t = fixture["tensors"]

    def read(key):
        return np.fromfile(fixture_dir / t[key]["file"], dtype="<f4").reshape(t[key]["shape"])

    if case.get("video") is not None:
        return read("video_soft_tokens_0").reshape(-1, t["video_soft_tokens_0"]["shape"][-1])
    if not case["images"]:
        return None
    if "soft_tokens" in t:  # Gemma 3: [images, 16, hidden]
        return read("soft_tokens")[case["images"]].reshape(-1, t["soft_tokens"]["shape"][-1])
    return np.concatenate([read(f"soft_tokens_{i}") for i in case["images"]])


def encoder_output(model, inputs):
    """transformers' soft tokens for the case, [tokens, hidden], or None."""
    if "pixel_values_videos" in inputs:
        out = model.model.get_video_features(inputs["pixel_values_videos"], inputs["video_position_ids"],
                                             num_frames_per_video=inputs["num_frames_per_video"], return_dict=True)
    elif "pixel_values" in inputs:
        extra = (inputs["image_position_ids"],) if "image_position_ids" in inputs else ()
        out = model.model.get_image_features(inputs["pixel_values"], *extra, return_dict=True)
    else:
        return None
    pooled = out.pooler_output
    if isinstance(pooled, (tuple, list)):
        pooled = torch.cat(list(pooled), dim=0)
    return pooled.reshape(-1, pooled.shape[-1]).float().cpu().numpy()


def margin(row):
    top = np.sort(row.astype(np.float64))[-2:]
    return float(top[1] - top[0])


def compare(logits, ref, case):
    diff = np.abs(logits.astype(np.float64) - ref.astype(np.float64))
    per_pos = diff.max(axis=1)
    spans = case["spans"]
    regions = {}
    if spans:
        inside = np.zeros(len(per_pos), dtype=bool)
        for s, e in spans:
            inside[s:e] = True
        first = spans[0][0]
        before = np.arange(len(per_pos)) < first
        regions = {"before_spans": float(per_pos[before].max()) if before.any() else None,
                   "in_spans": float(per_pos[inside].max()),
                   "after_spans": float(per_pos[~inside & ~before].max())}
    ours, theirs = logits.argmax(axis=1), ref.argmax(axis=1)
    bad = [{"position": int(p), "transformers": int(ours[p]), "fixture": int(theirs[p]),
            "margin_transformers": margin(logits[p]), "margin_fixture": margin(ref[p])}
           for p in np.nonzero(ours != theirs)[0]]
    worst = int(per_pos.argmax())
    return {
        "positions": int(len(per_pos)),
        "max_abs_diff": float(per_pos.max()),
        "max_abs_diff_at": {"position": worst, "token": int(diff[worst].argmax())},
        "regions": regions,
        "per_position": [float(x) for x in per_pos],
        "argmax_agree": int((ours == theirs).sum()),
        "argmax_disagree": bad,
        "last_argmax": int(ours[-1]),
        "last_argmax_fixture_json": case["last_argmax"],
        "min_margin_transformers": min(margin(r) for r in logits),
        "logits_abs_max": float(np.abs(ref).max()),
    }


def with_fixture_soft_tokens(inputs, fixture, case, soft):
    """The case's inputs with the pixels replaced by the fixture's soft
    tokens, passed as the encoder's output (mm_encoder_outputs): the
    language model alone, on the soft tokens the fixture's logits used."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    out = {k: v for k, v in inputs.items() if k not in (
        "pixel_values", "image_position_ids", "pixel_values_videos", "video_position_ids", "num_frames_per_video")}
    t = torch.from_numpy(soft).to(inputs["input_ids"].device)
    if case.get("video") is not None:
        out["mm_encoder_outputs"] = {"video": BaseModelOutputWithPooling(pooler_output=(t,))}
    elif "soft_tokens" in fixture["tensors"]:  # Gemma 3: one [images, tokens, hidden] tensor
        out["mm_encoder_outputs"] = {"image": BaseModelOutputWithPooling(
            pooler_output=t.reshape(len(case["images"]), -1, t.shape[-1]))}
    else:  # Gemma 4: a tuple of [tokens, hidden], one per image
        sizes = [fixture["images"][i]["tokens"] for i in case["images"]]
        out["mm_encoder_outputs"] = {"image": BaseModelOutputWithPooling(pooler_output=torch.split(t, sizes))}
    return out


@torch.no_grad()
def run_case(model, entry, npz, device, fixture, case, soft_ref):
    """Logits of the case, the encoder's soft tokens, and the logits with
    the fixture's soft tokens in place of transformers' (None for text)."""
    arrays = dict(np.load(npz))
    inputs = {k: torch.from_numpy(v).to(device) for k, v in arrays.items()}
    text_config = model.config.get_text_config()
    saved = {k: getattr(text_config, k) for k in entry.get("text_config_overrides", {})}
    try:
        for k, v in entry.get("text_config_overrides", {}).items():
            setattr(text_config, k, v)
        logits = model(**inputs).logits[0].float().cpu().numpy()
        lm_only = None
        if soft_ref is not None and "mm_encoder_outputs" not in inspect.signature(model.forward).parameters:
            # Older transformers (5.17) have no such argument and would
            # silently run the placeholders as text.
            lm_only = "this transformers' forward() takes no mm_encoder_outputs"
        elif soft_ref is not None:
            try:
                lm_only = model(**with_fixture_soft_tokens(inputs, fixture, case, soft_ref)).logits[0].float().cpu().numpy()
            except Exception as err:  # noqa: BLE001 - a diagnostic only
                lm_only = repr(err)
    finally:
        for k, v in saved.items():
            setattr(text_config, k, v)
    return logits, encoder_output(model, inputs), lm_only


def run_fixture(key, spec, inputs_dir, devices, tol, float64_device):
    fixture_dir = ROOT / spec["checkpoint"]
    fixture = json.loads((fixture_dir / "fixture.json").read_text())
    cases = {c["name"]: c for c in fixture["cases"]}
    out = {"checkpoint": spec["checkpoint"], "model_class": spec["model_class"], "devices": {}}
    logits_by, soft_by = {}, {}
    for device in devices:
        dev = {"cases": {}}
        t0 = time.time()
        model, loading, not_float32, attn = load_model(spec["model_class"], fixture_dir, device)
        dev.update(loading=loading, parameters_not_float32=not_float32, attn_implementation=attn,
                   load_seconds=round(time.time() - t0, 3))
        problems = []
        if loading["missing_keys"] or loading["mismatched_keys"] or loading["unexpected_keys"]:
            problems.append(f"loading: {loading}")
        for entry in spec["cases"]:
            name = entry["name"]
            case = cases[entry["compare_with"]]
            ref = np.fromfile(fixture_dir / case["logits"]["file"], dtype="<f4").reshape(case["logits"]["shape"])
            want = fixture_soft_tokens(fixture_dir, fixture, case)
            try:
                logits, soft, lm_only = run_case(model, entry, inputs_dir / key / entry["file"], device, fixture,
                                                 case, want)
            except Exception as err:  # noqa: BLE001 - one case's failure must not hide the others
                dev["cases"][name] = {"status": "error", "message": repr(err), "traceback": traceback.format_exc()}
                problems.append(f"{name}: {err!r}")
                continue
            res = {"compare_with": entry["compare_with"], "preprocessing": entry["preprocessing"]}
            if "pixels_max_abs_diff_vs_fixture_preprocessing" in entry:
                res["pixels_max_abs_diff_vs_fixture_preprocessing"] = entry["pixels_max_abs_diff_vs_fixture_preprocessing"]
            if entry.get("text_config_overrides"):
                res["text_config_overrides"] = entry["text_config_overrides"]
            res.update(compare(logits, ref, case))
            if soft is not None and want is not None:
                res["soft_tokens_max_abs_diff"] = (float(np.abs(soft - want).max()) if soft.shape == want.shape
                                                   else f"shapes differ: {list(soft.shape)} vs {list(want.shape)}")
            if isinstance(lm_only, str):
                res["with_fixture_soft_tokens"] = {"error": lm_only}
            elif lm_only is not None:
                c = compare(lm_only, ref, case)
                res["with_fixture_soft_tokens"] = {k: c[k] for k in (
                    "max_abs_diff", "max_abs_diff_at", "regions", "argmax_agree", "argmax_disagree")}
            strict = entry.get("same_pixels_as_fixture", True)
            res["checked_against_tolerance"] = strict
            if not strict:
                res["status"] = "info"
            else:
                res["status"] = "ok" if res["max_abs_diff"] <= tol and not res["argmax_disagree"] else "fail"
            if res["status"] == "fail":
                problems.append(f"{name}: max |diff| {res['max_abs_diff']:.3g}, "
                                f"{len(res['argmax_disagree'])} argmax disagreements")
            dev["cases"][name] = res
            logits_by.setdefault(name, {})[device] = logits
            if soft is not None:
                soft_by.setdefault(name, {})[device] = soft
        dev["problems"] = problems
        out["devices"][device] = dev
        del model
        if device == "cuda":
            torch.cuda.empty_cache()
    if float64_device:
        out["float64"] = float64_arbiter(spec, fixture_dir, fixture, cases, inputs_dir / key, float64_device,
                                         logits_by, soft_by)
    if len(devices) > 1:
        out["cuda_vs_cpu"] = {name: float(np.abs(v[devices[0]].astype(np.float64) - v[devices[1]]).max())
                              for name, v in logits_by.items() if len(v) == len(devices)}
    return out


@torch.no_grad()
def float64_arbiter(spec, fixture_dir, fixture, cases, inputs_dir, device, logits_by, soft_by):
    """The same forward in float64, as the exact answer both float32 sides
    are measured from: per case max |fixture - float64| and, per device,
    max |transformers float32 - float64|, for the logits and the soft tokens."""
    model = getattr(transformers, spec["model_class"]).from_pretrained(
        fixture_dir, dtype=torch.float64, attn_implementation="eager").to(device).eval()
    res = {"device": device}
    for entry in spec["cases"]:
        if not entry.get("same_pixels_as_fixture", True):
            continue
        name, case = entry["name"], cases[entry["compare_with"]]
        arrays = dict(np.load(inputs_dir / entry["file"]))
        inputs = {k: torch.from_numpy(v.astype(np.float64) if v.dtype.kind == "f" else v).to(device)
                  for k, v in arrays.items()}
        text_config = model.config.get_text_config()
        saved = {k: getattr(text_config, k) for k in entry.get("text_config_overrides", {})}
        try:
            for k, v in entry.get("text_config_overrides", {}).items():
                setattr(text_config, k, v)
            exact = model(**inputs).logits[0].cpu().numpy()
        finally:
            for k, v in saved.items():
                setattr(text_config, k, v)
        ref = np.fromfile(fixture_dir / case["logits"]["file"], dtype="<f4").reshape(case["logits"]["shape"])
        c = compare(ref, exact, case)
        r = {"fixture_vs_float64": c["max_abs_diff"], "fixture_vs_float64_regions": c["regions"],
             "transformers_float32_vs_float64": {d: float(np.abs(v - exact).max())
                                                 for d, v in logits_by.get(name, {}).items()}}
        soft = encoder_output(model, inputs)
        want = fixture_soft_tokens(fixture_dir, fixture, case)
        if want is not None and "mm_encoder_outputs" in inspect.signature(model.forward).parameters:
            # The language model alone, in float64, on the fixture's own soft tokens.
            try:
                with_soft = with_fixture_soft_tokens(inputs, fixture, case, want.astype(np.float64))
                for k, v in entry.get("text_config_overrides", {}).items():
                    setattr(text_config, k, v)
                lm = model(**with_soft).logits[0].cpu().numpy()
                r["fixture_vs_float64_on_fixture_soft_tokens"] = float(np.abs(ref - lm).max())
            except Exception as err:  # noqa: BLE001 - a diagnostic only
                r["fixture_vs_float64_on_fixture_soft_tokens"] = repr(err)
            finally:
                for k, v in saved.items():
                    setattr(text_config, k, v)
        if soft is not None and want is not None and soft.shape == want.shape:
            r["soft_tokens_fixture_vs_float64"] = float(np.abs(want - soft).max())
            r["soft_tokens_transformers_float32_vs_float64"] = {d: float(np.abs(v - soft).max())
                                                                for d, v in soft_by.get(name, {}).items()}
        res[name] = r
    del model
    return res


def summary_line(key, device, name, r):
    if r.get("status") == "error":
        return f"{key} {device} {name}: ERROR {r['message']}"
    reg = ", ".join(f"{k} {v:.3g}" for k, v in r["regions"].items() if v is not None)
    soft = r.get("soft_tokens_max_abs_diff")
    soft = f", soft tokens {soft:.3g}" if isinstance(soft, float) else ""
    lm = r.get("with_fixture_soft_tokens")
    if lm:
        soft += (f", LM on the fixture's soft tokens {lm['max_abs_diff']:.3g}" if "error" not in lm
                 else f", LM on the fixture's soft tokens: {lm['error']}")
    return (f"{key} {device} {name}: max |diff| {r['max_abs_diff']:.3g}" + (f" ({reg})" if reg else "") + soft +
            f"; argmax {r['argmax_agree']}/{r['positions']}, last {r['last_argmax']} "
            f"(fixture {r['last_argmax_fixture_json']}); {r['status']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", type=pathlib.Path, required=True, help="folder written by transformers_vlm_inputs.py")
    ap.add_argument("--out", type=pathlib.Path, required=True, help="the JSON report")
    ap.add_argument("--devices", default=None, help="comma-separated: cuda,cpu (default: cuda if there is one, and cpu)")
    ap.add_argument("--tol", type=float, default=TOL)
    ap.add_argument("--float64", default="cpu", help="device for the float64 run ('' for none)")
    args = ap.parse_args()

    devices = args.devices.split(",") if args.devices else (["cuda", "cpu"] if torch.cuda.is_available() else ["cpu"])
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    manifest = json.loads((args.inputs / "manifest.json").read_text())

    env = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
           "transformers_from": str(pathlib.Path(transformers.__file__).parent), "numpy": np.__version__,
           "devices": devices, "tf32": False, "cpu_threads": torch.get_num_threads(), "platform": platform.platform()}
    if "cuda" in devices:
        env["cuda"] = torch.version.cuda
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cudnn"] = torch.backends.cudnn.version()
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()), flush=True)

    fixtures = {}
    for key, spec in manifest["fixtures"].items():
        try:
            fixtures[key] = run_fixture(key, spec, args.inputs, devices, args.tol, args.float64)
        except Exception as err:  # noqa: BLE001
            fixtures[key] = {"status": "error", "message": repr(err), "traceback": traceback.format_exc()}
            print(f"{key}: ERROR {err!r}\n{traceback.format_exc()}", flush=True)
            continue
        for device, dev in fixtures[key]["devices"].items():
            for name, r in dev["cases"].items():
                print(summary_line(key, device, name, r), flush=True)
            for p in dev["problems"]:
                print(f"{key} {device}: PROBLEM {p}", flush=True)
        for name, r in fixtures[key].get("float64", {}).items():
            if name == "device":
                continue
            line = f"{key} float64 {name}: |fixture - float64| {r['fixture_vs_float64']:.3g}, |transformers - float64| " + \
                ", ".join(f"{d} {v:.3g}" for d, v in r["transformers_float32_vs_float64"].items())
            lm = r.get("fixture_vs_float64_on_fixture_soft_tokens")
            if lm is not None:
                line += f"; |fixture - float64 LM on its soft tokens| " + (f"{lm:.3g}" if isinstance(lm, float) else lm)
            if "soft_tokens_fixture_vs_float64" in r:
                line += f"; soft tokens: fixture {r['soft_tokens_fixture_vs_float64']:.3g}, transformers " + \
                    ", ".join(f"{d} {v:.3g}" for d, v in r["soft_tokens_transformers_float32_vs_float64"].items())
            print(line, flush=True)
        for name, v in fixtures[key].get("cuda_vs_cpu", {}).items():
            print(f"{key} cuda vs cpu {name}: {v:.3g}", flush=True)

    failed = [k for k, f in fixtures.items() if f.get("status") == "error" or
              any(d["problems"] for d in f["devices"].values())]
    report = {"environment": env, "inputs": {"generator": manifest["generator"], "versions": manifest["versions"]},
              "tolerance": args.tol, "passed": not failed, "failed": failed, "fixtures": fixtures}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print("PASS" if not failed else "FAIL: " + ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
