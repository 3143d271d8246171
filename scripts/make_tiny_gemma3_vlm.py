#!/usr/bin/env python3
"""Build a seeded tiny Gemma 3 vision-language checkpoint and mlx-vlm fixtures.

No small trained Gemma 3 vision tower can be had here, so this script makes
a random one shaped like gemma-3-4b-it's, small enough to commit, and records
what mlx-vlm computes for it:

    vision tower  SigLIP: a 14-pixel patch embedding of a 112x112 image (an
                  8x8 grid of patches), learned position embeddings, 2
                  pre-norm encoder layers (LayerNorm, 4-head bidirectional
                  attention with biases, tanh-GELU MLP), a final LayerNorm;
                  hidden 32, MLP 64
    projector     the patch grid average-pooled 2x2 to 4x4 = 16 soft tokens
                  (mm_tokens_per_image), Gemma RMSNorm (weight + 1), then a
                  [32, 64] matrix to the text hidden size
    text model    Gemma 3, 2 layers (sliding window 8, then global), hidden
                  64, 4 query / 2 KV heads of 16, vocabulary 272 with the
                  image tokens at 260 (<start_of_image>), 261
                  (<end_of_image>) and 262 (<image_soft_token>); only there
                  so that mlx-vlm loads the checkpoint: no fixture uses it

Every parameter gets seeded random values (numpy PCG64): matrices
standard normal over sqrt(fan-in), biases and position embeddings smaller,
LayerNorm scales around 1 and Gemma RMSNorm weights around 0 (the
multiplier is 1 + w). They are written under the names of the published
checkpoints (vision_tower.vision_model.*, multi_modal_projector.*,
language_model.model.*; the patch embedding in PyTorch's [out, in, kh, kw]
layout, which mlx-vlm's sanitize transposes), float32, and the reference is
the checkpoint as mlx_vlm.utils.load_model reads it back from disk.

Images: image0 is 40x30 (a colour gradient with a red square), upscaled to
112x112; image1 is 150x131 (a busy pattern), downscaled. Both are written as
raw RGB bytes (imageN.rgb, row-major, 3 bytes per pixel). They go through
the preprocessing mlx-vlm's Gemma3Processor delegates images to:
transformers' AutoImageProcessor with use_fast=False, which without torch
is Gemma3ImageProcessorPil (PIL resize of the uint8 image with the
preprocessor config's filter, 2 = bilinear as in the published
checkpoints; rescale by 1/255 in float64, then float32; normalize with mean
and std 0.5). image1 is also processed with filter 3 (bicubic).

Then, on MLX's CPU in float32, exactly as mlx-vlm's Model.get_input_embeddings
does: the vision tower on the NHWC pixels (its post-LayerNorm output: the
features) and the projector on those (the soft tokens).

Written to testdata/ref/gemma3_vlm_tiny/: config.json,
preprocessor_config.json, model.safetensors, image0.rgb, image1.rgb,
pixel_values.f32 ([2, 3, 112, 112]), pixel_values_bicubic.f32 ([1, 3, 112,
112], image1), vision_features.f32 ([2, 64, 32]), soft_tokens.f32 ([2, 16,
64]), all float32 little-endian row-major, and fixture.json with the shapes,
files and versions.

mlx-vlm's vision tower normalizes its output with LayerNorm eps 1e-5
whatever the config says, where transformers' SiglipVisionTransformer uses
the config's layer_norm_eps (1e-6 here and in the published configs);
fixture.json records how much the features and soft tokens move between
the two (post_layernorm_eps_effect).

Usage, from the repository root, after scripts/setup_pyvlm.sh:

    PYTHONPATH=.deps/pyvlm python3 scripts/make_tiny_gemma3_vlm.py

The output is deterministic: a rerun rewrites the same bytes.
"""

import argparse
import json
import os
import pathlib
from importlib.metadata import version

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from PIL import Image
from safetensors.numpy import save_file
from transformers import AutoImageProcessor

from mlx_vlm.models import gemma3
from mlx_vlm.utils import load_model

SEED = 20261203
IMAGE_SIZE = 112
PATCH = 14
TOKENS = 16
VISION_HIDDEN = 32
TEXT_HIDDEN = 64
VOCAB = 272
BOI, EOI, IMAGE_TOKEN = 260, 261, 262

VISION_CONFIG = {
    "model_type": "siglip_vision_model",
    "hidden_size": VISION_HIDDEN,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_channels": 3,
    "image_size": IMAGE_SIZE,
    "patch_size": PATCH,
    "layer_norm_eps": 1e-6,
    "hidden_act": "gelu_pytorch_tanh",
    "attention_dropout": 0.0,
    "vision_use_head": False,
}

TEXT_CONFIG = {
    "model_type": "gemma3_text",
    "vocab_size": VOCAB,
    "hidden_size": TEXT_HIDDEN,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "query_pre_attn_scalar": 16,
    "rms_norm_eps": 1e-6,
    "hidden_activation": "gelu_pytorch_tanh",
    "sliding_window": 8,
    "sliding_window_pattern": 2,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_theta": 1000000.0,
    "rope_global_base_freq": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "max_position_embeddings": 4096,
    "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
    # mlx-vlm reads the soft-token count from the text config, transformers
    # from the top level: both carry it.
    "mm_tokens_per_image": TOKENS,
}

CONFIG = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "boi_token_index": BOI,
    "eoi_token_index": EOI,
    "image_token_index": IMAGE_TOKEN,
    "mm_tokens_per_image": TOKENS,
    "bos_token_id": 2,
    "eos_token_id": [1, 106],
    "pad_token_id": 0,
    "initializer_range": 0.02,
    "text_config": TEXT_CONFIG,
    "vision_config": VISION_CONFIG,
    "torch_dtype": "float32",
}

# What the published Gemma 3 checkpoints ship, at this image size.
PREPROCESSOR = {
    "image_processor_type": "Gemma3ImageProcessor",
    "processor_class": "Gemma3Processor",
    "image_seq_length": TOKENS,
    "do_convert_rgb": None,
    "do_resize": True,
    "size": {"height": IMAGE_SIZE, "width": IMAGE_SIZE},
    "resample": 2,
    "do_rescale": True,
    "rescale_factor": 0.00392156862745098,
    "do_normalize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "do_pan_and_scan": None,
    "pan_and_scan_max_num_crops": None,
    "pan_and_scan_min_crop_size": None,
    "pan_and_scan_min_ratio_to_activate": None,
}


def random_params(model, rng):
    """Seeded values for every parameter of the mlx-vlm model, by name."""
    out = {}
    for name, p in tree_flatten(model.parameters()):
        shape = p.shape
        if name.startswith("language_model.") and name.endswith("lm_head.weight"):
            continue  # tied: sanitize copies the embedding
        if "layer_norm" in name or "post_layernorm" in name:
            v = rng.uniform(0.5, 1.5, size=shape) if name.endswith("weight") else 0.1 * rng.standard_normal(shape)
        elif "norm" in name:
            # Gemma RMSNorm: the multiplier is 1 + w.
            v = rng.uniform(-0.5, 0.5, size=shape)
        elif name.endswith("bias"):
            v = 0.1 * rng.standard_normal(shape)
        elif "position_embedding" in name:
            v = 0.5 * rng.standard_normal(shape)
        elif "patch_embedding" in name:
            v = rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))
        elif "mm_input_projection_weight" in name:
            v = rng.standard_normal(shape) / np.sqrt(shape[0])
        else:
            v = rng.standard_normal(shape) / np.sqrt(shape[-1])
        out[name] = v.astype(np.float32)
    return out


def hf_names(params):
    """mlx-vlm names to the published checkpoint names and layouts."""
    out = {}
    for name, v in params.items():
        if name.endswith("patch_embedding.weight"):
            v = np.ascontiguousarray(v.transpose(0, 3, 1, 2))  # [out, kh, kw, in] -> [out, in, kh, kw]
        out[name] = v
    return out


def make_images():
    """Two deterministic RGB images, uint8 [h, w, 3]."""
    h, w = 30, 40
    y, x = np.mgrid[0:h, 0:w]
    img0 = np.stack([x * 255 // (w - 1), y * 255 // (h - 1), np.full_like(x, 96)], axis=-1)
    img0[8:18, 22:32] = [255, 0, 0]
    h, w = 131, 150
    y, x = np.mgrid[0:h, 0:w]
    img1 = np.stack([(x * 7 + y * 3) % 256, (x * y) % 256, 255 - (x + 2 * y) % 256], axis=-1)
    img1[(x - 60) ** 2 + (y - 70) ** 2 < 900] = [20, 200, 40]
    return [img0.astype(np.uint8), img1.astype(np.uint8)]


def f32(path, a):
    a = np.ascontiguousarray(np.asarray(a, dtype="<f4"))
    a.tofile(path)
    return list(a.shape)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata/ref/gemma3_vlm_tiny")
    args = ap.parse_args()
    mx.set_default_device(mx.cpu)
    d = pathlib.Path(args.out)
    d.mkdir(parents=True, exist_ok=True)

    cfg = gemma3.ModelConfig.from_dict(CONFIG)
    cfg.text_config = gemma3.TextConfig.from_dict(TEXT_CONFIG)
    cfg.vision_config = gemma3.VisionConfig.from_dict(VISION_CONFIG)
    params = random_params(gemma3.Model(cfg), np.random.default_rng(SEED))
    save_file(hf_names(params), str(d / "model.safetensors"), metadata={"format": "pt"})
    os.chmod(d / "model.safetensors", 0o644)
    for name, obj in (("config.json", CONFIG), ("preprocessor_config.json", PREPROCESSOR)):
        with open(d / name, "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")

    # The reference is the checkpoint as mlx-vlm loads it from disk.
    model = load_model(d, strict=True)
    model.set_dtype(mx.float32)
    loaded = dict(tree_flatten(model.parameters()))
    for name, v in params.items():
        got = np.array(loaded[name])
        if not np.array_equal(got, v):
            raise SystemExit(f"{name}: mlx-vlm loaded other values")

    images = make_images()
    for i, img in enumerate(images):
        img.tofile(d / f"image{i}.rgb")
    pil = [Image.fromarray(img) for img in images]
    proc = AutoImageProcessor.from_pretrained(str(d), use_fast=False)
    pixels = np.asarray(proc(images=pil, return_tensors="np")["pixel_values"])
    bicubic = np.asarray(proc(images=pil[1:], resample=3, return_tensors="np")["pixel_values"])

    def tower(m):
        x = mx.array(pixels).transpose(0, 2, 3, 1).astype(mx.float32)
        hidden, _, _ = m.vision_tower(x, output_hidden_states=True)
        soft = m.multi_modal_projector(hidden)
        mx.eval(hidden, soft)
        return np.array(hidden), np.array(soft)

    features, soft = tower(model)
    # The same with the final LayerNorm at the config's eps, as transformers
    # computes it.
    post = model.vision_tower.vision_model.post_layernorm
    shipped_eps = post.eps
    post.eps = VISION_CONFIG["layer_norm_eps"]
    features_hf_eps, soft_hf_eps = tower(model)
    post.eps = shipped_eps

    files = {
        "pixel_values": ("pixel_values.f32", pixels),
        "pixel_values_bicubic": ("pixel_values_bicubic.f32", bicubic),
        "vision_features": ("vision_features.f32", features),
        "soft_tokens": ("soft_tokens.f32", soft),
    }
    fixture = {
        "format_version": 1,
        "generator": "scripts/make_tiny_gemma3_vlm.py",
        "reference": {
            "mlx_vlm": version("mlx-vlm"), "mlx": mx.__version__, "transformers": version("transformers"),
            "pillow": version("pillow"), "numpy": np.__version__, "device": str(mx.default_device()),
            "dtype": "float32", "image_processor": type(proc).__name__,
        },
        "seed": SEED,
        "images": [
            {"file": f"image{i}.rgb", "width": img.shape[1], "height": img.shape[0], "layout": "rgb8, row-major"}
            for i, img in enumerate(images)
        ],
        "tensors": {
            key: {"file": file, "shape": f32(d / file, a), "dtype": "float32-le"}
            for key, (file, a) in files.items()
        },
        "notes": {
            "pixel_values": "images 0 and 1, resample 2 (bilinear), [n, 3, height, width]",
            "pixel_values_bicubic": "image 1 with resample 3 (bicubic)",
            "vision_features": "vision tower output (after post_layernorm, eps %g as mlx-vlm has it), [n, patches, vision hidden]" % shipped_eps,
            "soft_tokens": "multi_modal_projector output, [n, mm_tokens_per_image, text hidden]",
        },
        "post_layernorm_eps_effect": {
            "mlx_vlm_eps": shipped_eps,
            "config_eps": VISION_CONFIG["layer_norm_eps"],
            "vision_features_max_abs_diff": float(np.max(np.abs(features - features_hf_eps))),
            "soft_tokens_max_abs_diff": float(np.max(np.abs(soft - soft_hf_eps))),
        },
        "params": int(sum(v.size for v in params.values())),
    }
    with open(d / "fixture.json", "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    total = sum(p.stat().st_size for p in d.iterdir() if p.is_file())
    print(f"{d}: {fixture['params']} parameters, {total} bytes; features |max| {np.abs(features).max():.3g}, "
          f"soft tokens |max| {np.abs(soft).max():.3g}; post_layernorm eps effect "
          f"{fixture['post_layernorm_eps_effect']['vision_features_max_abs_diff']:.3g} / "
          f"{fixture['post_layernorm_eps_effect']['soft_tokens_max_abs_diff']:.3g}")


if __name__ == "__main__":
    main()
