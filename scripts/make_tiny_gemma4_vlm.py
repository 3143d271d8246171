#!/usr/bin/env python3
"""Build a seeded tiny Gemma 4 vision-language checkpoint and mlx-vlm fixtures.

No small trained Gemma 4 vision tower exists here, so this script makes a
random one with the published checkpoints' structure, small enough to
commit, and records what mlx-vlm 0.7.10 computes for it:

    vision tower  Gemma 4's: images resized (aspect kept) to a budget of 70
                  soft tokens, cut into 4-pixel patches (16 in the published
                  models) projected to hidden 32, plus learned x and y
                  position embeddings (a table of 64 per axis); 2 encoder
                  layers (RMSNorm before and after attention and MLP, 2 heads
                  of 16 with RMS-normed queries and keys, scale-free normed
                  values, 2-D RoPE: the first half of each head rotated by
                  the patch column, the second by its row, base 100;
                  bidirectional attention; a tanh-GELU gated MLP of 64), every
                  linear clipped to [input_min, input_max] before and
                  [output_min, output_max] after (use_clipped_linears); then
                  3x3 average pooling of the patch grid, times sqrt(32), and
                  standardization (x - std_bias) * std_scale
    embedder      RMSNorm without scale, then a [32 -> 32] projection to the
                  text hidden size: the soft tokens
    text model    Gemma 4 with per-layer inputs (width 8) and KV sharing: 4
                  layers (sliding window 16, global, sliding, global; the
                  last two reuse the first two's keys and values), hidden 32,
                  4 query heads of 16 (global 32) over 1 KV head, proportional
                  RoPE over a quarter of the global head, softcapping 30,
                  tied head, use_bidirectional_attention "vision"
    tokenizer     a Gemma-style BPE over 287 ids with byte fallback (below),
                  Gemma 4's special tokens and its chat template

Parameters are seeded (numpy PCG64): matrices standard normal over
sqrt(fan-in), norm weights and layer scalars around 1 (Gemma 4's norms
multiply by w itself), position embeddings and std_bias smaller, clip bounds
between 1.5 and 3 in magnitude so that some activations are clipped. They are
written float32 under the published names (model.vision_tower.*,
model.embed_vision.*, model.language_model.*), and the reference is the
checkpoint as mlx_vlm.utils.load_model reads it back.

Tokenizer: ids 0..3 <pad> <eos> <bos> <unk>; 4..259 the byte pieces
<0x00>..<0xFF>; then the special tokens <|image> 260, <image|> 261, <|image|>
262, <|audio> 263, <audio|> 264, <|audio|> 265, <|video|> 266, <|turn> 267,
<turn|> 268, <|channel> 269, <channel|> 270, <|think|> 271, <|tool> 272,
<tool|> 273, <|tool_call> 274, <tool_call|> 275, <|tool_response> 276,
<tool_response|> 277, <|"|> 278, <mask> 279; then the pieces "▁" "\\n\\n"
"\\n" "t" "h" "th" "▁th" (280..286) with the merges \\n+\\n, t+h, ▁+th. The
token strings are Gemma 4's (tokenizer_config.json of the published
checkpoints: boi <|image>, eoi <image|>, image <|image|>, video <|video|>,
turn markers <|turn> and <turn|>); the chat template is
scripts/gemma4_chat_template.jinja, pinned by its sha256. transformers and
mlx-vlm carry no Gemma 4 chat template (it ships with the checkpoints), nor
does any npm tokenizer package; the file is Google's published template as
llama.cpp keeps a verbatim copy of it (models/templates/gemma4.jinja, commit
75f1ba7389067a9f90082515e124c377a1e104b2). It writes an image part as
"\\n\\n<|image|>\\n\\n" and, with thinking off, ends the generation prompt
with an empty thought channel.

Images: image0 is 40x30 (a gradient with a red square), resized up to
108x84 (27x21 patches, 63 soft tokens); image1 is 150x131 (a busy pattern),
resized down to 96x84 (24x21 patches, 56 soft tokens). Both are written as
raw RGB bytes. Preprocessing is transformers' Gemma4ImageProcessorPil with
the processor config: PIL bicubic resize of the uint8 image to the largest
multiple of 12 pixels (pooling 3 x patch 4) per side within the budget's
70 * 9 patches, rescale by 1/255 in float64 then float32, no normalization,
then patches in (row, column, channel) order within each patch, row-major
over the grid; mlx-vlm's own Gemma4ImageProcessor is checked against it.

The tower is mlx-vlm's, on the patches and their (column, row) positions
without padding, driven module by module to record the encoder output (the
features), the pooled and standardized vectors, and the soft tokens; its own
entry points (patches with positions, and channels-first pixels) must give
the same soft tokens.

Language-model logits at every position for three chats (user turn, with
the generation prompt): one_image [image0, "Describe this."], two_images
["Compare", image0, "and", image1, "please."], text_only "Hello there.".
Each is rendered with the chat template and expanded as Gemma4Processor
does: every <|image|> becomes <|image>, n x <|image|>, <image|> with n the
image's soft-token count. The logits follow transformers'
Gemma4ForConditionalGeneration, computed with mlx-vlm's decoder layers:

    ids         every multimodal placeholder (image, video, audio token)
                replaced by pad_token_id (0) before any embedding lookup
    embeddings  embed_tokens(id) * sqrt(32); at image n's placeholders its
                soft tokens, unscaled
    per-layer   embed_tokens_per_layer of those ids (the pad id at image
                positions) with the projection of the embeddings above (soft
                tokens included)
    masks       full-attention layers causal; sliding layers
                (q - k < 16) AND (k <= q OR q and k in the same image's run
                of placeholders), transformers' create_masks_for_vision_model
                for use_bidirectional_attention "vision"

video is [video0, "What happens?"]: two 64x48 frames 70 s apart (raw RGB
in video0.rgb), through mlx-vlm's Gemma4VideoProcessor (each frame resized,
rescaled and cut as an image under the video budget, here also 70; PIL
bicubic, where transformers' own video processor resizes with torchvision)
and the tower, expanded as the processor writes a video: per frame its
mm:ss timestamp, a space, <|image>, n x <|video|>, <image|>, the frames
joined by spaces. Each frame's run is its own block in the masks, and the
video placeholders are looked up as the pad token like the images'.

one_image_causal is one_image with every layer causal: what transformers
computes when use_bidirectional_attention is unset (the published small
models, going by transformers' comments).

mlx-vlm 0.7.10's own path differs: it zeroes the per-layer ids of
placeholders (the same as the pad id when pad_token_id is 0, as in the
published configs), and it opens the image blocks in the full-attention
layers too, its sliding rule being (window AND causal) OR same image.
fixture.json records how far its logits are (checks.mlx_vlm_native_*).

Also recorded: transformers' get_aspect_ratio_preserving_size for a table of
image sizes and every budget, with the published patch size 16 and with this
checkpoint's 4 (budgets.json).

The script stops unless the tokenizer round-trips, mlx-vlm's processor gives
the same ids and marks the same spans, its image processor agrees with
transformers' within 1e-6, the tower's entry points agree within 1e-5,
text_only equals mlx-vlm's causal forward within 1e-5, the bidirectional
mask moves one_image's logits inside the image, and reversing the order of
its soft tokens moves the last position's logits.

Usage, from the repository root, after scripts/setup_pyvlm.sh:

    PYTHONPATH=.deps/pyvlm python3 scripts/make_tiny_gemma4_vlm.py

The output is deterministic: a rerun rewrites the same bytes.
"""

import argparse
import hashlib
import json
import math
import os
import pathlib
from importlib.metadata import version

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from PIL import Image
from safetensors.numpy import save_file
from tokenizers import Tokenizer
from transformers import AutoTokenizer
from transformers.models.gemma4.image_processing_pil_gemma4 import (
    Gemma4ImageProcessorPil,
    get_aspect_ratio_preserving_size,
)

from mlx_vlm.models import gemma4
from mlx_vlm.models.gemma4.processing_gemma4 import Gemma4ImageProcessor, Gemma4Processor, Gemma4VideoProcessor
from mlx_vlm.utils import load_model

# The images and the file writers are the Gemma 3 fixture's.
from make_tiny_gemma3_vlm import f32, make_images, write_json

SEED = 20261204
PATCH = 4
POOL = 3
BUDGET = 70
VISION_HIDDEN = 32
TEXT_HIDDEN = 32
VOCAB = 287
WINDOW = 16
PAD, EOS, BOS = 0, 1, 2
BOI, EOI, IMAGE_TOKEN = 260, 261, 262
BOA, EOA, AUDIO_TOKEN, VIDEO_TOKEN = 263, 264, 265, 266
TURN, END_OF_TURN = 267, 268

TEMPLATE_FILE = pathlib.Path(__file__).with_name("gemma4_chat_template.jinja")
TEMPLATE_SHA256 = "87294f1fa94c3733b7f325252567c990edfd0269ff7df285f995ca5226c8989b"

VISION_CONFIG = {
    "model_type": "gemma4_vision",
    "hidden_size": VISION_HIDDEN,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_activation": "gelu_pytorch_tanh",
    "rms_norm_eps": 1e-6,
    "max_position_embeddings": 131072,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "rope_parameters": {"rope_theta": 100.0, "rope_type": "default"},
    "pooling_kernel_size": POOL,
    "patch_size": PATCH,
    "position_embedding_size": 64,
    "use_clipped_linears": True,
    "standardize": True,
    "default_output_length": BUDGET,
}

LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]

TEXT_CONFIG = {
    "model_type": "gemma4_text",
    "vocab_size": VOCAB,
    "hidden_size": TEXT_HIDDEN,
    "intermediate_size": 48,
    "num_hidden_layers": len(LAYER_TYPES),
    "layer_types": LAYER_TYPES,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "global_head_dim": 32,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {
        "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0, "rope_type": "proportional"},
        "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
    },
    "sliding_window": WINDOW,
    "max_position_embeddings": 4096,
    "final_logit_softcapping": 30.0,
    "hidden_activation": "gelu_pytorch_tanh",
    "attention_bias": False,
    "attention_k_eq_v": False,
    "enable_moe_block": False,
    "hidden_size_per_layer_input": 8,
    "vocab_size_per_layer_input": VOCAB,
    "num_kv_shared_layers": 2,
    "use_double_wide_mlp": True,
    "use_bidirectional_attention": "vision",
    "tie_word_embeddings": True,
    "pad_token_id": PAD,
    "bos_token_id": BOS,
    "eos_token_id": [EOS, END_OF_TURN],
}

CONFIG = {
    "architectures": ["Gemma4ForConditionalGeneration"],
    "model_type": "gemma4",
    "text_config": TEXT_CONFIG,
    "vision_config": VISION_CONFIG,
    "audio_config": None,
    "boi_token_id": BOI,
    "eoi_token_id": EOI,
    "image_token_id": IMAGE_TOKEN,
    "video_token_id": VIDEO_TOKEN,
    "boa_token_id": BOA,
    "eoa_token_index": EOA,
    "eoa_token_id": EOA,
    "audio_token_id": AUDIO_TOKEN,
    "vision_soft_tokens_per_image": BUDGET,
    "bos_token_id": BOS,
    "eos_token_id": [EOS, END_OF_TURN],
    "pad_token_id": PAD,
    "tie_word_embeddings": True,
    "initializer_range": 0.02,
    "dtype": "float32",
}

# processor_config.json as the published checkpoints lay it out (the
# feature extractor, for audio, left out).
IMAGE_PROCESSOR = {
    "image_processor_type": "Gemma4ImageProcessor",
    "do_convert_rgb": True,
    "do_resize": True,
    "resample": 3,
    "do_rescale": True,
    "rescale_factor": 0.00392156862745098,
    "do_normalize": False,
    "image_mean": [0.0, 0.0, 0.0],
    "image_std": [1.0, 1.0, 1.0],
    "patch_size": PATCH,
    "max_soft_tokens": BUDGET,
    "pooling_kernel_size": POOL,
}
PROCESSOR = {
    "processor_class": "Gemma4Processor",
    "image_seq_length": BUDGET,
    "image_processor": IMAGE_PROCESSOR,
    "video_processor": {
        "video_processor_type": "Gemma4VideoProcessor",
        "patch_size": PATCH,
        "max_soft_tokens": BUDGET,
        "pooling_kernel_size": POOL,
        "num_frames": 32,
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 0.00392156862745098,
        "do_normalize": False,
    },
}

SPECIAL_TOKENS = {
    PAD: "<pad>", EOS: "<eos>", BOS: "<bos>", 3: "<unk>",
    BOI: "<|image>", EOI: "<image|>", IMAGE_TOKEN: "<|image|>",
    BOA: "<|audio>", EOA: "<audio|>", AUDIO_TOKEN: "<|audio|>", VIDEO_TOKEN: "<|video|>",
    TURN: "<|turn>", END_OF_TURN: "<turn|>", 269: "<|channel>", 270: "<channel|>", 271: "<|think|>",
    272: "<|tool>", 273: "<tool|>", 274: "<|tool_call>", 275: "<tool_call|>",
    276: "<|tool_response>", 277: "<tool_response|>", 278: '<|"|>', 279: "<mask>",
}
BYTE_BASE = 4
PIECES = ["▁", "\n\n", "\n", "t", "h", "th", "▁th"]  # ids 280..286
MERGES = [["\n", "\n"], ["t", "h"], ["▁", "th"]]

IMAGE = {"type": "image"}
VIDEO = {"type": "video"}
# Frames 70 s apart: their timestamps read 00:00 and 01:10.
VIDEO_FPS = 1 / 70


def text_part(s):
    return {"type": "text", "text": s}


CASES = {
    "one_image": [IMAGE, text_part("Describe this.")],
    "two_images": [text_part("Compare"), IMAGE, text_part("and"), IMAGE, text_part("please.")],
    "text_only": "Hello there.",
}

# (width, height) pairs for the budget table: square, landscape, portrait,
# the fixture images, and extremes that hit the one-row/one-column rule.
BUDGET_SIZES = [(1, 1), (16, 16), (40, 30), (150, 131), (224, 224), (640, 480), (480, 640), (1920, 1080),
                (1080, 1920), (3000, 40), (40, 3000), (5000, 20), (20, 5000), (768, 768), (12, 500), (333, 777)]


# ---- parameters ----------------------------------------------------------


def random_params(model, rng):
    """Seeded values for every parameter of the mlx-vlm model, by name."""
    out = {}
    for name, p in tree_flatten(model.parameters()):
        shape = p.shape
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("input_min", "output_min"):
            v = -rng.uniform(1.5, 3.0, size=shape)
        elif leaf in ("input_max", "output_max"):
            v = rng.uniform(1.5, 3.0, size=shape)
        elif "norm" in name or leaf in ("layer_scalar", "std_scale"):
            v = rng.uniform(0.5, 1.5, size=shape)
        elif leaf == "std_bias":
            v = 0.1 * rng.standard_normal(shape)
        elif "position_embedding_table" in name:
            v = 0.5 * rng.standard_normal(shape)
        else:
            v = rng.standard_normal(shape) / np.sqrt(shape[-1])
        out[name] = np.asarray(v, dtype=np.float32)
    return out


def hf_name(name):
    """mlx-vlm's parameter name to the published checkpoint's."""
    if name.startswith("language_model.model."):
        return "model.language_model." + name[len("language_model.model."):]
    return "model." + name


# ---- images and preprocessing ---------------------------------------------


def image_processor_kwargs():
    return {k: v for k, v in IMAGE_PROCESSOR.items() if k != "image_processor_type"}


def preprocess(pil):
    """transformers' patches of one image: real patches [P, 3*PATCH^2],
    positions [P, 2] as (column, row), and the soft-token count."""
    proc = Gemma4ImageProcessorPil(**image_processor_kwargs())
    out = proc(images=[pil], return_tensors="np")
    pv, pos = np.asarray(out["pixel_values"][0]), np.asarray(out["image_position_ids"][0])
    real = (pos != -1).all(axis=-1)
    n = int(real.sum())
    if not real[:n].all() or np.any(pv[n:] != 0):
        raise SystemExit("transformers' padding is not a tail of zeros")
    return pv[:n], pos[:n], int(out["num_soft_tokens_per_image"][0])


def patchify(chw):
    """Channels-first pixels to patches in transformers' order."""
    c, h, w = chw.shape
    x = chw.reshape(c, h // PATCH, PATCH, w // PATCH, PATCH).transpose(1, 3, 2, 4, 0)
    return x.reshape((h // PATCH) * (w // PATCH), -1)


def mlx_vlm_pixels(pil):
    """mlx-vlm's own image processor: channels-first pixels."""
    data, counts = Gemma4ImageProcessor(**image_processor_kwargs())(pil)
    return np.asarray(data["pixel_values"][0]), counts[0]


# ---- vision tower ----------------------------------------------------------


def tower(model, patches, positions):
    """mlx-vlm's vision tower and embedder, module by module as
    VisionModel.__call__ runs them on patches with positions (no padding):
    (encoder output, pooled and standardized, soft tokens)."""
    vt = model.vision_tower
    x = mx.array(patches)[None]
    pos = mx.array(positions.astype(np.int32))[None]
    padding = mx.zeros(pos.shape[:2], dtype=mx.bool_)
    h = vt.patch_embedder.embed_patches(x, pos, padding)
    mask = mx.zeros((1, 1, x.shape[1], x.shape[1]), dtype=h.dtype)
    features = vt.encoder(h, pos, mask)
    pooled, _ = vt.pooler(features, pos, padding, output_length=x.shape[1] // POOL**2)
    pooled = (pooled - vt.std_bias) * vt.std_scale
    soft = model.embed_vision(pooled)
    mx.eval(features, pooled, soft)
    return np.array(features[0]), np.array(pooled[0]), np.array(soft[0])


def tower_entry_points(model, patches, positions, chw):
    """Soft tokens through mlx-vlm's own entry points: patches with their
    positions, and channels-first pixels (positions made by the tower)."""
    a = model.encode_image(mx.array(patches)[None], mx.array(positions.astype(np.int32))[None])
    b = model.encode_image(mx.array(chw)[None])
    mx.eval(a, b)
    return np.array(a[0]), np.array(b[0])


# ---- tokenizer -------------------------------------------------------------


def vocabulary():
    vocab = [None] * VOCAB
    for i, s in SPECIAL_TOKENS.items():
        vocab[i] = s
    for b in range(256):
        vocab[BYTE_BASE + b] = "<0x%02X>" % b
    vocab[VOCAB - len(PIECES):] = PIECES
    assert None not in vocab and len(set(vocab)) == VOCAB
    return vocab


def chat_template():
    t = TEMPLATE_FILE.read_text()
    if hashlib.sha256(t.encode()).hexdigest() != TEMPLATE_SHA256:
        raise SystemExit(f"{TEMPLATE_FILE} is not the pinned Gemma 4 chat template")
    return t


def tokenizer_files():
    """tokenizer.json and tokenizer_config.json laid out as Gemma's
    converted SentencePiece tokenizers are: spaces become "▁" before BPE,
    no pre-tokenizer, no post-processor, byte fallback."""
    vocab = vocabulary()
    ids = {s: i for i, s in enumerate(vocab)}
    for a, b in MERGES:
        assert a in ids and b in ids and a + b in ids, (a, b)
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, s in sorted(SPECIAL_TOKENS.items())
        ],
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ]},
        "model": {
            "type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
            "vocab": ids, "merges": MERGES,
        },
    }
    named = {
        "boi_token": "<|image>", "eoi_token": "<image|>", "image_token": "<|image|>",
        "boa_token": "<|audio>", "eoa_token": "<audio|>", "audio_token": "<|audio|>",
        "sot_token": "<|turn>", "eot_token": "<turn|>", "soc_token": "<|channel>", "eoc_token": "<channel|>",
        "think_token": "<|think|>", "std_token": "<|tool>", "etd_token": "<tool|>",
        "stc_token": "<|tool_call>", "etc_token": "<tool_call|>", "str_token": "<|tool_response>",
        "etr_token": "<tool_response|>", "escape_token": '<|"|>',
    }
    cfg = {
        "add_bos_token": False,
        "add_eos_token": False,
        "bos_token": "<bos>",
        "eos_token": "<turn|>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
        **named,
        "model_specific_special_tokens": named,
        "extra_special_tokens": ["<|video|>"],
        "clean_up_tokenization_spaces": False,
        "spaces_between_special_tokens": False,
        "model_max_length": TEXT_CONFIG["max_position_embeddings"],
        "padding_side": "left",
        "processor_class": "Gemma4Processor",
        # The published class is GemmaTokenizer, which transformers rebuilds
        # from the vocabulary with its own pipeline; this one reads
        # tokenizer.json as it is.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": chat_template(),
    }
    return tok, cfg


def check_tokenizer(tok):
    for i, s in enumerate(vocabulary()):
        if tok.token_to_id(s) != i:
            raise SystemExit(f"tokenizer: {s!r} is not id {i}")
    for s in ["Hello there.", "the\n\nthe\n", "a  b\n\n\nc", "ünïcödé ☃ 中文", "<|turn>user\nhi<turn|>\n"]:
        back = tok.decode(tok.encode(s).ids, skip_special_tokens=False)
        if back != s:
            raise SystemExit(f"tokenizer: {s!r} decodes back as {back!r}")
    for s, want in (("\n\n", [281]), ("\n\n\n", [281, 282]), (" the", [286, BYTE_BASE + ord("e")]), ("th", [285])):
        if tok.encode(s).ids != want:
            raise SystemExit(f"tokenizer: {s!r} is {tok.encode(s).ids}, want {want}")


# ---- prompts ---------------------------------------------------------------


def render(hf_tok, content):
    messages = [{"role": "user", "content": content}]
    return hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def expand(rendered, counts):
    """Gemma4Processor's expansion: the k-th <|image|> becomes image k's run."""
    parts = rendered.split("<|image|>")
    if len(parts) != len(counts) + 1:
        raise SystemExit(f"{len(parts) - 1} image markers for {len(counts)} images")
    out = parts[0]
    for n, rest in zip(counts, parts[1:]):
        out += "<|image>" + "<|image|>" * n + "<image|>" + rest
    return out


def soft_token_spans(ids, counts, token=IMAGE_TOKEN):
    spans, start = [], None
    for i, t in enumerate(ids + [None]):
        if t == token and start is None:
            start = i
        elif t != token and start is not None:
            spans.append([start, i])
            start = None
    if [e - s for s, e in spans] != counts or any(ids[s - 1] != BOI or ids[e] != EOI for s, e in spans):
        raise SystemExit(f"placeholder runs {spans} are not the images' {counts}")
    return spans


def check_against_processor(hf_tok, rendered, pil_images, ids, spans):
    """mlx-vlm's Gemma4Processor, given the rendered chat and the images,
    must give the same ids and mark exactly the spans as images."""
    proc = Gemma4Processor(image_processor=Gemma4ImageProcessor(**image_processor_kwargs()), tokenizer=hf_tok,
                           image_seq_length=BUDGET)
    out = proc(text=rendered, images=pil_images or None, add_special_tokens=False)
    types = np.zeros(len(ids), dtype=np.int64)
    for s, e in spans:
        types[s:e] = 1
    got = np.array(out["input_ids"][0]).tolist()
    if got != ids or not np.array_equal(np.array(out["mm_token_type_ids"][0]), types):
        raise SystemExit(f"mlx-vlm's Gemma4Processor tokenizes the chat differently:\n{got}\n{ids}")


# ---- video -----------------------------------------------------------------


def make_video():
    """Two deterministic 64x48 RGB frames, uint8 [t, h, w, 3]: a square
    that moves and changes colour over a shifting pattern."""
    h, w = 48, 64
    y, x = np.mgrid[0:h, 0:w]
    frames = []
    for t in range(2):
        f = np.stack([(x * 4 + t * 60) % 256, (y * 5) % 256, np.full_like(x, 40 + 100 * t)], axis=-1)
        f[10 + 8 * t:26 + 8 * t, 12 + 20 * t:28 + 20 * t] = [250, 250 - 200 * t, 30]
        frames.append(f)
    return np.stack(frames).astype(np.uint8)


def video_processor_kwargs():
    return {k: v for k, v in PROCESSOR["video_processor"].items() if k != "video_processor_type"}


def video_reference(model, frames, checks):
    """mlx-vlm's video processor and tower on the frames: per frame its
    soft tokens, the soft-token count and the timestamps."""
    out = Gemma4VideoProcessor(**video_processor_kwargs())([frames.transpose(0, 3, 1, 2)], fps=VIDEO_FPS)
    pv, pos = np.asarray(out["pixel_values_videos"][0]), np.asarray(out["video_position_ids"][0])
    n, stamps = out["num_soft_tokens_per_frame"][0], out["frame_timestamps"][0]
    soft, worst = [], 0.0
    for t, frame in enumerate(frames):
        real = (pos[t] != -1).all(axis=-1)
        # A frame is preprocessed as an image under the same budget: check
        # against transformers' image processor.
        patches, positions, count = preprocess(Image.fromarray(frame))
        if count != n or not np.array_equal(positions, pos[t][real]):
            raise SystemExit(f"frame {t}: the video processor's grid is not the image processor's")
        worst = max(worst, max_diff(pv[t][real], patches))
        soft.append(tower(model, pv[t][real], pos[t][real])[2])
    checks["video_frames_vs_image_processor_max_abs_diff"] = worst
    native = model.embed_vision(model.vision_tower(mx.array(pv), mx.array(pos.astype(np.int32))))
    mx.eval(native)
    checks["video_tower_padded_frames_max_abs_diff"] = max_diff(np.array(native[0]), np.concatenate(soft))
    if worst > 1e-6 or checks["video_tower_padded_frames_max_abs_diff"] > 1e-5:
        raise SystemExit(f"video: the processors or the tower's entry points disagree: {checks}")
    return np.stack(soft), n, stamps


def expand_video(rendered, n, stamps):
    """Gemma4Processor's expansion of the one <|video|>: per frame its
    mm:ss timestamp, a space and its run, the frames joined by spaces."""
    parts = rendered.split("<|video|>")
    if len(parts) != 2:
        raise SystemExit(f"{len(parts) - 1} video markers")
    frames = [f"{int(t // 60):02d}:{int(t % 60):02d} <|image>" + "<|video|>" * n + "<image|>" for t in stamps]
    return parts[0] + " ".join(frames) + parts[1]


def check_video_against_processor(hf_tok, rendered, frames, ids, spans):
    proc = Gemma4Processor(image_processor=Gemma4ImageProcessor(**image_processor_kwargs()), tokenizer=hf_tok,
                           video_processor=Gemma4VideoProcessor(**video_processor_kwargs()), image_seq_length=BUDGET)
    out = proc(text=rendered, videos=[frames.transpose(0, 3, 1, 2)], fps=VIDEO_FPS, add_special_tokens=False)
    types = np.zeros(len(ids), dtype=np.int64)
    for s, e in spans:
        types[s:e] = 2
    got = np.array(out["input_ids"][0]).tolist()
    if got != ids or not np.array_equal(np.array(out["mm_token_type_ids"][0]), types):
        raise SystemExit(f"mlx-vlm's Gemma4Processor tokenizes the video chat differently:\n{got}\n{ids}")


# ---- language model --------------------------------------------------------


def visible(n, spans, window=None, bidirectional=True):
    """[query, key] booleans, transformers' rule: causal, or (sliding layers
    only) both in one image's run; then the window."""
    q = np.arange(n)[:, None]
    k = np.arange(n)[None, :]
    see = k <= q
    if bidirectional and window is not None:
        block = np.full(n, -1)
        for g, (s, e) in enumerate(spans):
            block[s:e] = g
        see = see | ((block[:, None] == block[None, :]) & (block[:, None] >= 0))
    if window is not None:
        see = see & (q - k < window)
    return see


def additive(see):
    return mx.array(np.where(see, 0.0, -np.inf).astype(np.float32))[None, None]


def lm_logits(lm, ids, spans, soft, bidirectional=True):
    """Logits at every position, transformers' way, through mlx-vlm's layers."""
    m = lm.model
    ids = np.array(ids)
    llm_ids = np.where(np.isin(ids, [IMAGE_TOKEN, VIDEO_TOKEN, AUDIO_TOKEN]), PAD, ids)
    x = mx.array(llm_ids)[None]
    h = np.array(m.embed_tokens(x) * m.embed_scale)
    for (s, e), tokens in zip(spans, soft):
        h[0, s:e] = tokens
    h = mx.array(h)
    per_layer = m.project_per_layer_inputs(h, m.get_per_layer_inputs(x))
    masks = {
        "sliding_attention": additive(visible(len(ids), spans, WINDOW, bidirectional)),
        "full_attention": additive(visible(len(ids), spans)),
    }
    intermediates = [(None, None)] * len(m.layers)
    for i, layer in enumerate(m.layers):
        kvs, offset = intermediates[m.previous_kvs[i]]
        h, kvs, offset = layer(h, masks[layer.layer_type], None, per_layer_input=per_layer[:, :, i, :],
                               shared_kv=kvs, offset=offset)
        intermediates[i] = (kvs, offset)
    logits = lm.logits_from_hidden(m.norm(h))[0]
    mx.eval(logits)
    return np.array(logits)


def mlx_vlm_native(model, ids, spans, chws):
    """mlx-vlm 0.7.10's own multimodal forward, for comparison only."""
    x = mx.array([ids])
    types = np.zeros((1, len(ids)), dtype=np.int32)
    for s, e in spans:
        types[0, s:e] = 1
    kw = {"mm_token_type_ids": mx.array(types)}
    pv = [mx.array(c)[None] for c in chws] if chws else None
    out = model(x, pixel_values=pv, **kw).logits[0]
    mx.eval(out)
    return np.array(out)


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


# ---- main ------------------------------------------------------------------


def build_model_config():
    cfg = gemma4.ModelConfig.from_dict(CONFIG)
    cfg.text_config = gemma4.TextConfig.from_dict(TEXT_CONFIG)
    cfg.vision_config = gemma4.VisionConfig.from_dict(VISION_CONFIG)
    return cfg


def write_checkpoint(d):
    params = random_params(gemma4.Model(build_model_config()), np.random.default_rng(SEED))
    save_file({hf_name(k): v for k, v in params.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    os.chmod(d / "model.safetensors", 0o644)
    tok, tok_cfg = tokenizer_files()
    for name, obj in (("config.json", CONFIG), ("processor_config.json", PROCESSOR),
                      ("tokenizer.json", tok), ("tokenizer_config.json", tok_cfg)):
        write_json(d / name, obj)
    return params


def load_reference(d, params):
    model = load_model(d, strict=True)
    model.set_dtype(mx.float32)
    loaded = dict(tree_flatten(model.parameters()))
    for name, v in params.items():
        if not np.array_equal(np.array(loaded[name]), v):
            raise SystemExit(f"{name}: mlx-vlm loaded other values")
    return model


def budget_table():
    rows = []
    for patch in (16, PATCH):
        for budget in (70, 140, 280, 560, 1120):
            for w, h in BUDGET_SIZES:
                row = {"width": w, "height": h, "patch": patch, "pooling": POOL, "budget": budget}
                try:
                    th, tw = get_aspect_ratio_preserving_size(h, w, patch, budget * POOL**2, POOL)
                    row.update(target_width=tw, target_height=th,
                               tokens=(th // patch) * (tw // patch) // POOL**2)
                except ValueError:
                    row["error"] = True
                rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata/ref/gemma4_vlm_tiny")
    args = ap.parse_args()
    mx.set_default_device(mx.cpu)
    d = pathlib.Path(args.out)
    d.mkdir(parents=True, exist_ok=True)

    params = write_checkpoint(d)
    model = load_reference(d, params)
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    check_tokenizer(tok)
    hf_tok = AutoTokenizer.from_pretrained(str(d))

    images = make_images()
    pil = [Image.fromarray(img) for img in images]
    checks = {}
    tensors, image_meta, soft = {}, [], []
    for i, (img, p) in enumerate(zip(images, pil)):
        img.tofile(d / f"image{i}.rgb")
        patches, positions, count = preprocess(p)
        cols, rows = int(positions[:, 0].max()) + 1, int(positions[:, 1].max()) + 1
        grid = np.stack(np.meshgrid(np.arange(cols), np.arange(rows), indexing="xy"), -1).reshape(-1, 2)
        if not np.array_equal(positions, grid) or count * POOL**2 != len(patches):
            raise SystemExit(f"image{i}: positions are not the row-major grid")
        chw, mlx_count = mlx_vlm_pixels(p)
        checks[f"image{i}_mlx_vlm_processor_max_abs_diff"] = max_diff(patchify(chw), patches)
        if mlx_count != count or chw.shape[1:] != (rows * PATCH, cols * PATCH) or checks[f"image{i}_mlx_vlm_processor_max_abs_diff"] > 1e-6:
            raise SystemExit(f"image{i}: mlx-vlm's image processor disagrees with transformers'")
        features, pooled, s = tower(model, patches, positions)
        via_patches, via_pixels = tower_entry_points(model, patches, positions, chw)
        checks[f"image{i}_tower_entry_points_max_abs_diff"] = max(max_diff(via_patches, s), max_diff(via_pixels, s))
        if checks[f"image{i}_tower_entry_points_max_abs_diff"] > 1e-5:
            raise SystemExit(f"image{i}: mlx-vlm's tower entry points disagree: {checks}")
        soft.append(s)
        image_meta.append({"file": f"image{i}.rgb", "width": img.shape[1], "height": img.shape[0],
                           "layout": "rgb8, row-major", "resized_width": cols * PATCH, "resized_height": rows * PATCH,
                           "grid_cols": cols, "grid_rows": rows, "tokens": count})
        for key, a in (("pixel_values", patches), ("vision_features", features), ("pooled", pooled),
                       ("soft_tokens", s)):
            tensors[f"{key}_{i}"] = (f"{key}_{i}.f32", a)
    counts = [m["tokens"] for m in image_meta]

    lm = model.language_model
    cases, prompts, results = [], {}, {}
    for name, content in CASES.items():
        rendered = render(hf_tok, content)
        n_images = rendered.count("<|image|>")
        prompt = expand(rendered, counts[:n_images])
        ids = tok.encode(prompt, add_special_tokens=False).ids
        if ids[0] != BOS or ids.count(BOS) != 1:
            raise SystemExit(f"{name}: want exactly one <bos>, first")
        spans = soft_token_spans(ids, counts[:n_images])
        check_against_processor(hf_tok, rendered, pil[:n_images], ids, spans)
        prompts[name] = (ids, spans)
        variants = [(name, True)] + ([(name + "_causal", False)] if name == "one_image" else [])
        for case, bidirectional in variants:
            logits = lm_logits(lm, ids, spans, soft[:n_images], bidirectional)
            file = f"logits_{case}.f32"
            last = int(np.argmax(logits[-1]))
            cases.append({
                "name": case, "prompt": prompt, "ids": ids, "images": list(range(n_images)), "spans": spans,
                "bidirectional": bidirectional,
                "logits": {"file": file, "shape": f32(d / file, logits), "dtype": "float32-le"},
                "last_argmax": last, "last_argmax_token": tok.id_to_token(last),
            })
            results[case] = logits

    frames = make_video()
    frames.tofile(d / "video0.rgb")
    video_soft, per_frame, stamps = video_reference(model, frames, checks)
    tensors["video_soft_tokens_0"] = ("video_soft_tokens_0.f32", video_soft)
    rendered = render(hf_tok, [VIDEO, text_part("What happens?")])
    prompt = expand_video(rendered, per_frame, stamps)
    ids = tok.encode(prompt, add_special_tokens=False).ids
    spans = soft_token_spans(ids, [per_frame] * len(frames), VIDEO_TOKEN)
    check_video_against_processor(hf_tok, rendered, frames, ids, spans)
    logits = lm_logits(lm, ids, spans, list(video_soft))
    last = int(np.argmax(logits[-1]))
    cases.append({
        "name": "video", "prompt": prompt, "ids": ids, "images": [], "video": 0, "spans": spans,
        "bidirectional": True,
        "logits": {"file": "logits_video.f32", "shape": f32(d / "logits_video.f32", logits), "dtype": "float32-le"},
        "last_argmax": last, "last_argmax_token": tok.id_to_token(last),
    })
    results["video"] = logits
    videos = [{"file": "video0.rgb", "frames": len(frames), "width": frames.shape[2], "height": frames.shape[1],
               "layout": "rgb8, frames of rows, row-major", "fps": VIDEO_FPS, "timestamps": stamps,
               "tokens_per_frame": per_frame}]

    ids, _ = prompts["text_only"]
    checks["text_only_vs_mlx_vlm_forward_max_abs_diff"] = max_diff(results["text_only"], np.array(lm(mx.array([ids])).logits[0]))
    ids, spans = prompts["one_image"]
    (s, e), = spans
    swapped = lm_logits(lm, ids, spans, [soft[0][::-1]])
    checks["one_image_causal_max_abs_diff_before_image"] = max_diff(results["one_image_causal"][:s], results["one_image"][:s])
    checks["one_image_causal_max_abs_diff_in_image"] = max_diff(results["one_image_causal"][s:e], results["one_image"][s:e])
    checks["one_image_causal_max_abs_diff_after_image"] = max_diff(results["one_image_causal"][e:], results["one_image"][e:])
    checks["one_image_reversed_soft_tokens_last_max_abs_diff"] = max_diff(swapped[-1], results["one_image"][-1])
    for name in ("one_image", "two_images"):
        ids, spans = prompts[name]
        native = mlx_vlm_native(model, ids, spans, [mlx_vlm_pixels(p)[0] for p in pil[:len(spans)]])
        checks[f"mlx_vlm_native_{name}_max_abs_diff"] = max_diff(native, results[name])
        checks[f"mlx_vlm_native_{name}_last_max_abs_diff"] = max_diff(native[-1], results[name][-1])
    if checks["text_only_vs_mlx_vlm_forward_max_abs_diff"] > 1e-5:
        raise SystemExit(f"text_only: not mlx-vlm's forward: {checks}")
    if checks["one_image_causal_max_abs_diff_in_image"] < 1e-3 or checks["one_image_causal_max_abs_diff_before_image"] != 0:
        raise SystemExit(f"one_image: the bidirectional mask does not act as it should: {checks}")
    if checks["one_image_reversed_soft_tokens_last_max_abs_diff"] < 1e-3:
        raise SystemExit(f"one_image: the image does not reach the last position: {checks}")

    write_json(d / "budgets.json", budget_table(), indent=None)
    fixture = {
        "format_version": 1,
        "generator": "scripts/make_tiny_gemma4_vlm.py",
        "reference": {
            "mlx_vlm": version("mlx-vlm"), "mlx": mx.__version__, "transformers": version("transformers"),
            "tokenizers": version("tokenizers"), "pillow": version("pillow"), "numpy": np.__version__,
            "device": str(mx.default_device()), "dtype": "float32",
            "image_processor": "transformers Gemma4ImageProcessorPil",
            "chat_template_sha256": TEMPLATE_SHA256,
        },
        "seed": SEED,
        "images": image_meta,
        "videos": videos,
        "tensors": {k: {"file": f, "shape": f32(d / f, a), "dtype": "float32-le"} for k, (f, a) in tensors.items()},
        "notes": {
            "pixel_values_N": "image N's patches as transformers' processor gives them, padding dropped: "
                              "[patches, patch*patch*3], patches row-major over the grid, values (row, column, "
                              "channel) within a patch, in [0, 1]",
            "vision_features_N": "the encoder's output, [patches, vision hidden]",
            "pooled_N": "3x3 average pooling times sqrt(vision hidden), standardized, [tokens, vision hidden]",
            "soft_tokens_N": "embed_vision output (RMSNorm without scale, projection), [tokens, text hidden]",
            "cases": "logits [tokens, vocab] at every position with transformers' Gemma 4 semantics (see the "
                     "script); spans are [start, end) of each image's placeholders, images index image0/image1",
        },
        "cases": cases,
        "checks": checks,
        "params": int(sum(v.size for v in params.values())),
    }
    write_json(d / "fixture.json", fixture, indent=1)
    total = sum(p.stat().st_size for p in d.iterdir() if p.is_file())
    print(f"{d}: {fixture['params']} parameters, {total} bytes")
    for m in image_meta:
        print(f"  {m['file']}: {m['width']}x{m['height']} -> {m['resized_width']}x{m['resized_height']}, {m['tokens']} tokens")
    for c in cases:
        print(f"  {c['name']}: {len(c['ids'])} tokens, spans {c['spans']}, last argmax {c['last_argmax']} {c['last_argmax_token']!r}")
    for k, v in checks.items():
        print(f"  {k}: {v:.3g}")


if __name__ == "__main__":
    main()
