"""Reference fixtures for the gpt-oss forward pass (model/gptoss).

Builds a seeded tiny random gpt-oss (a layer with an 8-token sliding window,
then one with full attention, 8 experts of which 4 are routed per token, YaRN
rotary scaling, attention sinks, untied output head), writes it in the
checkpoint layouts the Go loader reads, and records what mlx-lm computes
for a few fixed token-id prompts: every step's full logits and the greedy
tokens.

Usage (mlx 0.32.4 CPU and mlx-lm 0.32.2, as `make mlx-lm` installs them):

    PYTHONPATH=.deps/py-mlxlm python3 scripts/gen_gptoss_fixtures.py

Output under testdata/ref/gptoss_tiny/ (see fixture.json):

    bf16/       mlx-lm's own save of the model: split gate/up/down expert
                stacks [experts, out, in], bfloat16.
    hf_bf16/    the same weights in HF transformers' dense layout: fused
                gate_up_proj [experts, in, 2*width] with gate and up columns
                alternating, down_proj [experts, width, in], *_bias.
                mlx-lm cannot read this layout; it computes what bf16/ does.
    hf_mxfp4/   the experts quantized to MXFP4 by MLX, written in the
                published checkpoints' layout (gate_up_proj_blocks /
                _scales, gate and up rows alternating); the rest bfloat16.
                The reference is mlx-lm reading this directory (its
                sanitize step turns the layout into its own).
    mlx_mxfp4/  mlx-lm's own quantization of the model in mode mxfp4 (its
                gpt-oss rule: the router at 8-bit affine, everything else
                MXFP4, embedding and output head included), saved by mlx-lm.

Each reference runs with every float parameter cast to float32 (mode
"f32", compared tightly); the quantized ones also as loaded (mode "bf16":
bfloat16 activations, where the two implementations round differently).
MLX's CPU gather_mm takes float32 only, so dense experts have no bf16 run.
"""

import json
import math
import os
import pathlib
import sys

import numpy as np

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from mlx_lm.models import gpt_oss
from mlx_lm.models.switch_layers import SwitchLinear
from mlx_lm.utils import load_model, quantize_model, save_config, save_model

SEED = 20250806
OUT = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "ref" / "gptoss_tiny"
STEPS = 12

SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|end|>"]
VOCAB = 256 + len(SPECIALS) + 4  # four unused ids at the top

CONFIG = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "attention_bias": True,
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_local_experts": 8,
    "num_experts_per_tok": 4,
    "experts_per_token": 4,
    "sliding_window": 8,
    "layer_types": ["sliding_attention", "full_attention"],
    "rms_norm_eps": 1e-05,
    "rope_theta": 150000,
    # YaRN as gpt-oss configures it, but with the ramp rounded to whole
    # pairs (no "truncate": false): mlx-lm always rounds.
    "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                     "original_max_position_embeddings": 4096},
    "max_position_embeddings": 131072,
    "swiglu_limit": 7.0,
    "tie_word_embeddings": False,
    "bos_token_id": 256,
    "eos_token_id": 258,
    "pad_token_id": 257,
    "torch_dtype": "bfloat16",
}

# Token-id prompts: shorter than the window (and crossing it while
# decoding), two and a half windows long, and in between.
PROMPTS = [
    [256, 72, 101, 108, 108],
    [256, 84, 104, 101, 32, 111, 108, 100, 32, 108, 105, 103, 104, 116, 104, 111, 117, 115, 101, 32],
    [256, 73, 110, 32, 116, 104, 101, 32, 109, 111, 114, 110],
]


def random_params(model, rng):
    """Seeded parameters at scales where every part of the block matters:
    the clamp of the SwiGLU is reached, routing is decisive, sinks take a
    visible share of attention, and the logits spread over several units."""
    out = {}
    for name, v in tree_flatten(model.parameters()):
        shape = v.shape
        if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
            a = 1 + 0.2 * rng.standard_normal(shape)
        elif name.endswith("sinks"):
            a = rng.standard_normal(shape)
        elif name == "model.embed_tokens.weight":
            a = rng.standard_normal(shape)
        elif name == "lm_head.weight":
            a = 0.5 * rng.standard_normal(shape)
        elif ".experts." in name and name.endswith(".bias"):
            a = 0.5 * rng.standard_normal(shape)
        elif name.endswith(".bias"):
            a = 0.2 * rng.standard_normal(shape)
        elif "mlp.router" in name:
            a = 0.3 * rng.standard_normal(shape)
        elif "experts.down_proj" in name:
            a = 0.08 * rng.standard_normal(shape)
        elif ".experts." in name:
            a = 0.5 * rng.standard_normal(shape)
        else:
            a = rng.standard_normal(shape) / math.sqrt(shape[-1])
        out[name] = mx.array(a.astype(np.float32)).astype(mx.bfloat16)
    return out


def fresh_model(params):
    model = gpt_oss.Model(gpt_oss.ModelArgs.from_dict(CONFIG))
    model.update(tree_unflatten(list(params.items())))
    mx.eval(model.parameters())
    return model


def tokenizer_files():
    """A byte-level BPE vocabulary without merges: one token per byte, then
    gpt-oss-like specials. Only the loader needs it; prompts are token ids."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    vocab = {chars[b]: b for b in range(256)}
    added = []
    for i, s in enumerate(SPECIALS):
        vocab[s] = 256 + i
        added.append({"id": 256 + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tok = {
        "version": "1.0", "added_tokens": added, "normalizer": None, "pre_tokenizer": level,
        "post_processor": None, "decoder": level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": []},
    }
    cfg = {"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>",
           "tokenizer_class": "PreTrainedTokenizerFast"}
    return tok, cfg


def write_dir(d, weights, config):
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("*.safetensors*"):
        old.unlink()
    mx.save_safetensors(str(d / "model.safetensors"), weights, metadata={"format": "pt"})
    write_meta(d, config)


def write_meta(d, config):
    with open(d / "config.json", "w") as f:
        json.dump(dict(sorted(config.items())), f, indent=2)
        f.write("\n")
    tok, tok_cfg = tokenizer_files()
    with open(d / "tokenizer.json", "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(d / "tokenizer_config.json", "w") as f:
        json.dump(tok_cfg, f, indent=2)
        f.write("\n")


def hf_dense(params):
    """HF transformers' GptOssExperts layout of the split expert stacks:
    gate_up_proj[e] is [in, 2*width] with gate feature j in column 2j and up
    feature j in column 2j+1; down_proj[e] is [width, in]."""
    out = {}
    for name, v in params.items():
        if ".experts.up_proj." in name or ".experts.down_proj.bias" in name:
            continue
        if ".experts.gate_proj." in name:
            base, kind = name.split(".experts.gate_proj.")
            gate, up = v, params[name.replace("gate_proj", "up_proj")]
            inter = mx.stack([gate, up], axis=-2 if kind == "weight" else -1)
            if kind == "weight":  # [E, W, 2, H] -> [E, 2W, H] -> [E, H, 2W]
                fused = inter.reshape(gate.shape[0], -1, gate.shape[-1]).swapaxes(-1, -2)
                out[base + ".experts.gate_up_proj"] = fused
                g, u = np.array(fused[:, :, 0::2].astype(mx.float32)), np.array(fused[:, :, 1::2].astype(mx.float32))
                assert np.array_equal(g, np.array(gate.swapaxes(-1, -2).astype(mx.float32)))
                assert np.array_equal(u, np.array(up.swapaxes(-1, -2).astype(mx.float32)))
            else:
                out[base + ".experts.gate_up_proj_bias"] = inter.reshape(gate.shape[0], -1)
            continue
        if ".experts.down_proj.weight" in name:
            base = name.split(".experts.")[0]
            out[base + ".experts.down_proj"] = v.swapaxes(-1, -2)
            out[base + ".experts.down_proj_bias"] = params[name.replace(".weight", ".bias")]
            continue
        out[name] = v
    return {k: mx.contiguous(v) for k, v in out.items()}


def hf_mxfp4(quantized):
    """The published MXFP4 layout of experts quantized by MLX: mlx-lm's
    sanitize step read backwards. gate and up rows alternate in
    gate_up_proj; the packed words are stored as their bytes,
    [E, out, in/32, 16]."""
    out = {}
    for name, v in quantized.items():
        if ".experts.up_proj." in name:
            continue
        if ".experts.gate_proj." in name:
            base, kind = name.split(".experts.gate_proj.")
            up = quantized[name.replace("gate_proj", "up_proj")]
            inter = mx.stack([v, up], axis=2 if kind != "bias" else -1)
            if kind == "bias":
                out[base + ".experts.gate_up_proj_bias"] = inter.reshape(v.shape[0], -1)
                continue
            fused = inter.reshape(v.shape[0], -1, v.shape[-1])  # [E, W, 2, X] -> [E, 2W, X]
            if kind == "weight":
                out[base + ".experts.gate_up_proj_blocks"] = blocks(fused)
            else:
                out[base + ".experts.gate_up_proj_scales"] = fused
            continue
        if ".experts.down_proj." in name:
            base, kind = name.split(".experts.down_proj.")
            key = {"weight": "_blocks", "scales": "_scales", "bias": "_bias"}[kind]
            out[base + ".experts.down_proj" + key] = blocks(v) if kind == "weight" else v
            continue
        out[name] = v
    return {k: mx.contiguous(v) for k, v in out.items()}


def blocks(words):
    b = np.array(words).view(np.uint8)
    return mx.array(b.reshape(*words.shape[:-1], -1, 16))


def reference(model, dtype):
    if dtype == "f32":
        model.set_dtype(mx.float32)
    runs = []
    for prompt in PROMPTS:
        cache = model.make_cache()
        x = mx.array([prompt])
        logits, tokens = [], []
        for _ in range(STEPS):
            out = model(x, cache=cache)[0, -1].astype(mx.float32)
            mx.eval(out)
            row = np.array(out)
            logits.append(row)
            tok = int(np.argmax(row))
            tokens.append(tok)
            x = mx.array([[tok]])
        runs.append((tokens, np.stack(logits)))
    return runs


def margins(logits):
    top = np.sort(logits, axis=-1)[:, -2:]
    return [float(round(m, 6)) for m in (top[:, 1] - top[:, 0])]


def main():
    mx.random.seed(SEED)
    rng = np.random.default_rng(SEED)
    params = random_params(gpt_oss.Model(gpt_oss.ModelArgs.from_dict(CONFIG)), rng)
    OUT.mkdir(parents=True, exist_ok=True)

    # bf16: mlx-lm's own save.
    model = fresh_model(params)
    d = OUT / "bf16"
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("*.safetensors*"):
        old.unlink()
    save_model(d, model)
    write_meta(d, CONFIG)

    # hf_bf16: transformers' dense layout of the same weights.
    write_dir(OUT / "hf_bf16", hf_dense(params), CONFIG)

    # hf_mxfp4: experts quantized by MLX, in the published layout.
    model = fresh_model(params)
    cfg = dict(CONFIG)
    _, qcfg = quantize_model(model, cfg, 32, 4, mode="mxfp4",
                             quant_predicate=lambda p, m: isinstance(m, SwitchLinear))
    quantized = dict(tree_flatten(model.parameters()))
    hf_cfg = dict(CONFIG)
    hf_cfg["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                   "model.embed_tokens", "lm_head"],
    }
    write_dir(OUT / "hf_mxfp4", hf_mxfp4(quantized), hf_cfg)

    # mlx_mxfp4: mlx-lm's own quantization and save.
    model = fresh_model(params)
    model, qcfg = quantize_model(model, dict(CONFIG), None, None, mode="mxfp4")
    d = OUT / "mlx_mxfp4"
    d.mkdir(parents=True, exist_ok=True)
    for old in d.glob("*.safetensors*"):
        old.unlink()
    save_model(d, model)
    write_meta(d, qcfg)
    save_config(dict(qcfg), d / "config.json")

    fixture = {
        "generator": "scripts/gen_gptoss_fixtures.py",
        "mlx": mx.__version__,
        "seed": SEED,
        "steps": STEPS,
        "prompts": PROMPTS,
        "variants": {},
    }
    refs = {"bf16": "bf16", "hf_bf16": "bf16", "hf_mxfp4": "hf_mxfp4", "mlx_mxfp4": "mlx_mxfp4"}
    # MLX's CPU gather_mm multiplies float32 only: the dense experts run in
    # float32 alone.
    modes = {"bf16": ["f32"], "hf_mxfp4": ["f32", "bf16"], "mlx_mxfp4": ["f32", "bf16"]}
    for name in refs:
        fixture["variants"][name] = {"reference": refs[name]}
    for name, dtypes in modes.items():
        runs = {}
        for dtype in dtypes:
            model, _ = load_model(OUT / name, strict=True)
            out = []
            for i, (tokens, logits) in enumerate(reference(model, dtype)):
                file = f"{name}.{dtype}.prompt{i}.f32"
                logits.astype("<f4").tofile(OUT / file)
                out.append({"tokens": tokens, "logits": file, "margins": margins(logits)})
            runs[dtype] = out
        fixture["variants"][name]["runs"] = runs
    with open(OUT / "fixture.json", "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    total = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({total} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
