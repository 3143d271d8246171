#!/usr/bin/env python3
"""Generate mlx-lm reference fixtures for tiny random Gemma 4 text models.

Two seeded random checkpoints, each small enough to commit, cover the
Gemma 4 text architecture between them:

    testdata/ref/gemma4_tiny/moe/  shaped like gemma-4-26B-A4B: nested
        model_type gemma4 with a text_config; sliding and full-attention
        layers with different head sizes and KV head counts; keys as values
        in the full-attention layers (attention_k_eq_v); proportional RoPE
        over a quarter of the global head; a mixture-of-experts block beside
        the dense MLP; tied embeddings; final logit softcapping
    testdata/ref/gemma4_tiny/ple/  shaped like the small Gemma 4 models:
        flat model_type gemma4_text; per-layer input embeddings; the last
        layers reusing earlier layers' KV (num_kv_shared_layers) with a
        double-wide MLP; an untied output head

Both use a sliding window of 8 tokens so that the prompts (one longer than
the window, one crossing it while decoding) exercise it.

The script builds mlx-lm's own model for each config, fills every parameter
with seeded random values (numpy PCG64; norm weights, layer scalars and
router scales around 1 so that each is exercised), writes them under the
HF checkpoint names (what mlx-lm's sanitize maps from: experts as fused
gate_up_proj and down_proj tensors), reloads the directory through
mlx_lm.utils.load_model, and runs that model on the CPU in float32: one
prefill of the whole prompt, then one token per step, greedy, through
mlx-lm's own caches (a rotating cache of the window for sliding layers).

Written per model directory: config.json, model.safetensors (float32),
tokenizer.json and tokenizer_config.json (a byte-level vocabulary, only so
the directory opens as a checkpoint), and fixture.json: per prompt the
token ids, the greedy tokens, and the name of a float32 little-endian file
holding the full logits of every step ([steps, vocab], row-major; step k is
the distribution generated token k is chosen from, after the prompt and the
first k generated tokens). For the model without experts, also the logits
of the same steps in bfloat16 (weights cast by mlx-lm's set_dtype), fed the
float32 greedy tokens.

Usage, from the repository root, after make mlx-lm:

    PYTHONPATH=.deps/py-mlxlm python3 scripts/gen_gemma4_fixtures.py
"""

import argparse
import json
import os
import pathlib

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models import gemma4, gemma4_text
from mlx_lm.utils import load_model

SEED = 20260
STEPS = 24
WINDOW = 8

# Token ids 0..5 are specials; the byte-level alphabet follows.
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<|turn>", "<turn|>"]
VOCAB = len(SPECIALS) + 256

LAYER_TYPES = ["sliding_attention", "sliding_attention", "full_attention",
               "sliding_attention", "sliding_attention", "full_attention"]

ROPE = {
    "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
    "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
}

COMMON = {
    "model_type": "gemma4_text",
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": len(LAYER_TYPES),
    "layer_types": LAYER_TYPES,
    "num_attention_heads": 4,
    "head_dim": 16,
    "global_head_dim": 32,
    "rms_norm_eps": 1e-6,
    "rope_parameters": ROPE,
    "sliding_window": WINDOW,
    "max_position_embeddings": 4096,
    "final_logit_softcapping": 30.0,
    "hidden_activation": "gelu_pytorch_tanh",
    "attention_bias": False,
    "bos_token_id": 2,
    "eos_token_id": 1,
    "pad_token_id": 0,
    "dtype": "float32",
}

MOE_TEXT = dict(COMMON, **{
    "num_key_value_heads": 2,
    "num_global_key_value_heads": 1,
    "attention_k_eq_v": True,
    "intermediate_size": 64,
    "enable_moe_block": True,
    "num_experts": 8,
    "top_k_experts": 2,
    "moe_intermediate_size": 16,
    "hidden_size_per_layer_input": 0,
    "vocab_size_per_layer_input": VOCAB,
    "num_kv_shared_layers": 0,
    "use_double_wide_mlp": False,
    "tie_word_embeddings": True,
})

PLE_TEXT = dict(COMMON, **{
    "num_key_value_heads": 1,
    "attention_k_eq_v": False,
    "intermediate_size": 48,
    "enable_moe_block": False,
    "hidden_size_per_layer_input": 8,
    "vocab_size_per_layer_input": VOCAB,
    "num_kv_shared_layers": 2,
    "use_double_wide_mlp": True,
    "tie_word_embeddings": False,
    "eos_token_id": [1, 5],
})

MODELS = {
    # Nested like the published multimodal checkpoints: the language model
    # is the text_config, its tensors under model.language_model.
    "moe": {
        "config": {
            "architectures": ["Gemma4ForConditionalGeneration"],
            "model_type": "gemma4",
            "vocab_size": VOCAB,
            "text_config": MOE_TEXT,
            "eos_token_id": [1, 5],
            "tie_word_embeddings": True,
            "dtype": "float32",
        },
        "prefix": "model.language_model.",
    },
    "ple": {
        "config": dict(PLE_TEXT, architectures=["Gemma4ForCausalLM"]),
        "prefix": "model.",
    },
}

PROMPTS = [
    [2, 40, 77, 101],  # shorter than the window; crosses it while decoding
    [2] + [6 + (37 * i) % 256 for i in range(20)],  # longer than the window
    [2, 250, 9, 9, 130, 61, 200, 18, 77, 33, 140],
]


def random_params(model, rng):
    """Seeded values for every parameter of an mlx-lm model, by name."""
    out = {}
    for name, p in tree_flatten(model.parameters()):
        shape = p.shape
        last = name.rsplit(".", 1)[-1]
        if "norm" in name or name.endswith("layer_scalar") or last in ("scale", "per_expert_scale"):
            v = rng.uniform(0.5, 1.5, size=shape)
        elif "embed_tokens" in name:
            # Unit rms after the sqrt(hidden) embedding scale, so the layers'
            # contributions are not drowned by the token's own embedding
            # (which would make a tied head repeat its input).
            v = rng.standard_normal(size=shape) / np.sqrt(shape[-1])
        else:
            v = rng.standard_normal(size=shape) / np.sqrt(shape[-1])
        out[name] = mx.array(v.astype(np.float32))
    return out


def hf_names(params, prefix):
    """mlx-lm parameter names to HF checkpoint names (what sanitize undoes)."""
    out = {}
    for name, v in params.items():
        name = name.removeprefix("model.")
        if ".switch_glu." in name:
            base = name.split(".switch_glu.")[0]
            which = name.split(".switch_glu.")[1].split(".")[0]
            if which == "down_proj":
                out[prefix + base + ".down_proj"] = v
            elif which == "gate_proj":
                up = params["model." + base + ".switch_glu.up_proj.weight"]
                out[prefix + base + ".gate_up_proj"] = mx.concatenate([v, up], axis=-2)
            continue
        if name == "lm_head.weight":
            out[name] = v
            continue
        out[prefix + name] = v
    return out


def tokenizer_files():
    """A byte-level BPE vocabulary without merges, with Gemma's specials."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    alphabet = [chr(c) for _, c in sorted(zip(bs, cs))]
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for i, ch in enumerate(alphabet):
        vocab[ch] = len(SPECIALS) + i
    tok = {
        "version": "1.0",
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, s in enumerate(SPECIALS)
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab, "merges": []},
    }
    cfg = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
           "add_bos_token": True, "add_eos_token": False, "tokenizer_class": "PreTrainedTokenizerFast"}
    return tok, cfg


def build(name, spec, out_dir, rng):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    cfg = spec["config"]
    if cfg["model_type"] == "gemma4":
        model = gemma4.Model(gemma4.ModelArgs.from_dict(cfg))
    else:
        model = gemma4_text.Model(gemma4_text.ModelArgs.from_dict(cfg))
    params = random_params(model, rng)
    if cfg["model_type"] == "gemma4":
        params = {k.removeprefix("language_model."): v for k, v in params.items()}
    weights = hf_names(params, spec["prefix"])
    mx.save_safetensors(os.path.join(d, "model.safetensors"), weights, metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    tok, tok_cfg = tokenizer_files()
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
        f.write("\n")

    # The reference is the checkpoint as mlx-lm loads it from disk.
    ref, _ = load_model(pathlib.Path(d), strict=True)
    loaded = dict(tree_flatten(ref.parameters()))
    n_params = sum(v.size for v in loaded.values())

    prompts = []
    for pi, prompt in enumerate(PROMPTS):
        cache = ref.make_cache()
        logits = ref(mx.array([prompt]), cache=cache)[0, -1]
        rows, toks, margins = [], [], []
        for _ in range(STEPS):
            row = np.array(logits.astype(mx.float32))
            rows.append(row)
            top = np.sort(row)[-2:]
            margins.append(float(top[1] - top[0]))
            tok = int(np.argmax(row))
            toks.append(tok)
            logits = ref(mx.array([[tok]]), cache=cache)[0, -1]
        file = f"prompt{pi}.logits.f32"
        np.stack(rows).astype("<f4").tofile(os.path.join(d, file))
        prompts.append({
            "prompt_tokens": prompt,
            "generated_tokens": toks,
            "min_margin": min(margins),
            "logits": file,
        })
    # bfloat16 (weights, activations, cache), fed the float32 greedy tokens:
    # the numerics of a bf16 checkpoint. Not for the expert model: MLX's CPU
    # gather_mm, which mlx-lm's expert layer runs on, only takes float32.
    if not cfg.get("text_config", cfg).get("enable_moe_block"):
        ref.set_dtype(mx.bfloat16)
        for pi, (prompt, p) in enumerate(zip(PROMPTS, prompts)):
            cache = ref.make_cache()
            nxt, rows = prompt, []
            for s in range(STEPS):
                rows.append(np.array(ref(mx.array([nxt]), cache=cache)[0, -1].astype(mx.float32)))
                nxt = [p["generated_tokens"][s]]
            file = f"prompt{pi}.bf16_logits.f32"
            np.stack(rows).astype("<f4").tofile(os.path.join(d, file))
            p["bf16_logits"] = file
    fixture = {
        "format_version": 1,
        "generator": "scripts/gen_gemma4_fixtures.py",
        "reference": {"mlx_lm": _version("mlx_lm"), "mlx": mx.__version__, "device": str(mx.default_device()),
                      "dtype": "float32"},
        "seed": SEED,
        "vocab": VOCAB,
        "window": WINDOW,
        "steps": STEPS,
        "params": int(n_params),
        "prompts": prompts,
    }
    with open(os.path.join(d, "fixture.json"), "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    print(f"{name}: {n_params} parameters; " + "; ".join(
        f"prompt {i} ({len(p['prompt_tokens'])} tokens): {p['generated_tokens'][:8]}... min margin {p['min_margin']:.3g}"
        for i, p in enumerate(prompts)))


def _version(pkg):
    from importlib.metadata import version
    return version(pkg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata/ref/gemma4_tiny")
    args = ap.parse_args()
    mx.set_default_device(mx.cpu)
    for i, (name, spec) in enumerate(MODELS.items()):
        build(name, spec, args.out, np.random.default_rng([SEED, i]))


if __name__ == "__main__":
    main()
