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
    text model    Gemma 3, 2 layers (sliding window 24, then global), hidden
                  64, 4 query / 2 KV heads of 16, vocabulary 272 with the
                  image tokens at 260 (<start_of_image>), 261
                  (<end_of_image>) and 262 (<image_soft_token>)
    tokenizer     a Gemma-style (SentencePiece-converted) BPE over those 272
                  ids: <pad> <eos> <bos> <unk>, the 256 byte pieces <0x00>..
                  <0xFF> (ids 4..259), the image tokens, <start_of_turn> 263,
                  <end_of_turn> 264, then the pieces "▁" 265, "\\n\\n" 266,
                  "\\n" 267, "t" 268, "h" 269, "th" 270, "▁th" 271 (merges
                  \\n+\\n, t+h, ▁+th); every other character falls back to its
                  UTF-8 bytes. tokenizer_config.json carries Gemma 3's chat
                  template verbatim, <end_of_turn> as eos_token, and config.json
                  stops generation on ids 1 and 264.

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

Language-model logits with images, three chats (user turn only, with the
generation prompt):

    one_image   [image0, "Describe this."]
    two_images  ["Compare", image0, "and", image1, "please."]
    text_only   "Hello there."

Each is rendered with the chat template (transformers' apply_chat_template)
and expanded as transformers' Gemma3Processor does: every <start_of_image>
becomes "\\n\\n<start_of_image>" + 16 x "<image_soft_token>" +
"<end_of_image>\\n\\n". The tokenizer (special tokens parsed, none added:
the template writes the one <bos>) gives the ids. The logits at every
position follow transformers' Gemma3ForConditionalGeneration, computed with
mlx-vlm's own Gemma 3 decoder layers, final norm and tied head, the layer
loop driven here:

    embeddings  text: embed_tokens(id) * sqrt(64) (= 8 exactly); the 16
                positions of image n: the soft tokens of image n, unscaled
                (transformers writes the projector output over the scaled
                text embeddings)
    masks       additive float32, -inf where hidden. Full layers: key k is
                visible from query q iff k <= q, or q and k are soft tokens
                of the same image. Sliding layers: (k <= q and q - k < 24)
                or same image.

That is not mlx-vlm 0.7.10's own path, which divides the soft tokens by
sqrt(hidden_size) (the top-level config's, 2048 by default) and then
multiplies every embedding by sqrt(text hidden) rounded to bfloat16, and
keeps every position causal. fixture.json records how far that path's
logits are from these (mlx_vlm_native_path).

transformers 5.24 builds a sliding layer's mask as window AND (causal OR
same image); the rule above is (window AND causal) OR same image. The two
agree whenever an image's soft tokens fit in one window, which is why the
text model's sliding window is 24 (an image spans 16 positions).

mlx-vlm's vision tower normalizes its output with LayerNorm eps 1e-5
whatever the config says, where transformers' SiglipVisionTransformer uses
the config's layer_norm_eps (1e-6 here and in the published configs);
fixture.json records how much the features and soft tokens move between
the two (post_layernorm_eps_effect). The logits use mlx-vlm's soft tokens,
the ones in soft_tokens.f32.

Written to testdata/ref/gemma3_vlm_tiny/: config.json,
preprocessor_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, image0.rgb, image1.rgb, pixel_values.f32 ([2, 3,
112, 112]), pixel_values_bicubic.f32 ([1, 3, 112, 112], image1),
vision_features.f32 ([2, 64, 32]), soft_tokens.f32 ([2, 16, 64]),
logits_<case>.f32 ([tokens, 272]), all float32 little-endian row-major, and
fixture.json with the shapes, files, versions and, per case, the prompt
text, token ids, images, soft-token spans ([start, end) per image, in
order), logits file and the last position's greedy token.

The script stops with an error unless: the tokenizer maps every piece to
its id and round-trips sample text; transformers' Gemma3Processor, given
the rendered chat and the images, yields the same ids and marks the same
spans in its token_type_ids; both sliding-window rules give the same mask;
the text_only logits match mlx-vlm's ordinary causal forward within 1e-5;
a causal-only mask moves one_image's logits at its image positions by more
than 1e-3; and swapping image0 for image1 in one_image moves the last
position's logits by more than 1e-3. The figures go to fixture.json
(checks), with how far mlx-vlm's own multimodal path is from the fixture.

Usage, from the repository root, after scripts/setup_pyvlm.sh:

    PYTHONPATH=.deps/pyvlm python3 scripts/make_tiny_gemma3_vlm.py

The output is deterministic: a rerun rewrites the same bytes.
"""

import argparse
import hashlib
import json
import os
import pathlib
from importlib.metadata import version

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten
from PIL import Image
from safetensors.numpy import save_file
from tokenizers import Tokenizer
from transformers import AutoImageProcessor, AutoTokenizer
from transformers.models.gemma3.processing_gemma3 import Gemma3Processor

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
BOS, END_OF_TURN = 2, 264
# At least TOKENS, so that an image's soft tokens fit in one window (see the
# docstring on the sliding-layer mask).
SLIDING_WINDOW = 24

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
    "sliding_window": SLIDING_WINDOW,
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
    "bos_token_id": BOS,
    # <eos> and this vocabulary's <end_of_turn> (106 in the published one).
    "eos_token_id": [1, END_OF_TURN],
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

# The tokenizer: specials at the ids the config names, the byte pieces, and
# a handful of merged pieces so that BPE merges and the "▁" space marker are
# exercised. "\n" has to be a piece for "\n\n" to be reachable: BPE merges
# pieces, never byte-fallback tokens.
SPECIAL_TOKENS = {
    0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>",
    BOI: "<start_of_image>", EOI: "<end_of_image>", IMAGE_TOKEN: "<image_soft_token>",
    263: "<start_of_turn>", END_OF_TURN: "<end_of_turn>",
}
BYTE_BASE = 4
PIECES = ["▁", "\n\n", "\n", "t", "h", "th", "▁th"]  # ids 265..271
MERGES = [["\n", "\n"], ["t", "h"], ["▁", "th"]]  # in priority order

# Gemma 3's chat template, verbatim from the published tokenizer_config.json.
CHAT_TEMPLATE = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
"""
CHAT_TEMPLATE_SHA256 = "7de1c58e208eda46e9c7f86397df37ec49883aeece39fb961e0a6b24088dd3c4"

# What transformers' Gemma3Processor writes for each <start_of_image>.
IMAGE_SEQUENCE = "\n\n<start_of_image>" + "<image_soft_token>" * TOKENS + "<end_of_image>\n\n"

IMAGE = {"type": "image"}


def text_part(s):
    return {"type": "text", "text": s}


# name -> the user turn's content; its image parts take image0, image1 in order.
CASES = {
    "one_image": [IMAGE, text_part("Describe this.")],
    "two_images": [text_part("Compare"), IMAGE, text_part("and"), IMAGE, text_part("please.")],
    "text_only": "Hello there.",
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


def write_json(path, obj, indent=2):
    with open(path, "w") as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False)
        f.write("\n")


# ---- tokenizer ----------------------------------------------------------


def vocabulary():
    """The 272 pieces, by id."""
    vocab = [None] * VOCAB
    for i, s in SPECIAL_TOKENS.items():
        vocab[i] = s
    for b in range(256):
        vocab[BYTE_BASE + b] = "<0x%02X>" % b
    first = VOCAB - len(PIECES)
    vocab[first:] = PIECES
    assert None not in vocab and len(set(vocab)) == VOCAB
    return vocab


def tokenizer_files():
    """tokenizer.json and tokenizer_config.json, as Gemma's converted
    SentencePiece tokenizers lay them out: spaces become "▁" before BPE, no
    pre-tokenizer (the whole text between special tokens is one word), no
    post-processor (add_bos_token asks for the <bos>), and a decoder that
    turns "▁" back into spaces, byte pieces into bytes, and drops one
    leading space."""
    vocab = vocabulary()
    ids = {s: i for i, s in enumerate(vocab)}
    for a, b in MERGES:
        assert a in ids and b in ids and a + b in ids, (a, b)
    if hashlib.sha256(CHAT_TEMPLATE.encode()).hexdigest() != CHAT_TEMPLATE_SHA256:
        raise SystemExit("CHAT_TEMPLATE is not the published Gemma 3 template")
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
    cfg = {
        "add_bos_token": True,
        "add_eos_token": False,
        "bos_token": "<bos>",
        "eos_token": "<end_of_turn>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "boi_token": "<start_of_image>",
        "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>",
        "extra_special_tokens": {
            "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>", "image_token": "<image_soft_token>",
        },
        "clean_up_tokenization_spaces": False,
        "spaces_between_special_tokens": False,
        "model_max_length": TEXT_CONFIG["max_position_embeddings"],
        "padding_side": "left",
        "processor_class": "Gemma3Processor",
        # Not the published GemmaTokenizer: transformers 5.24 builds that one
        # from the vocabulary with its own pipeline and adds a <mask> as a
        # 273rd token. This class takes tokenizer.json as it is.
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }
    return tok, cfg


def check_tokenizer(tok):
    """Stop unless every piece maps to its id and sample text round-trips."""
    for i, s in enumerate(vocabulary()):
        if tok.token_to_id(s) != i:
            raise SystemExit(f"tokenizer: {s!r} is not id {i}")
    samples = ["Hello there.", "the\n\nthe\n", "a  b\n\n\nc", "ünïcödé ☃ 中文",
               "<start_of_turn>user\nhi<end_of_turn>\n"]
    for s in samples:
        back = tok.decode(tok.encode(s).ids, skip_special_tokens=False)
        if back != s:
            raise SystemExit(f"tokenizer: {s!r} decodes back as {back!r}")
    # The merges, and "\n\n" as one piece.
    for s, want in (("\n\n", [266]), ("\n\n\n", [266, 267]), (" the", [271, BYTE_BASE + ord("e")]),
                    ("th", [270]), (" x", [265, BYTE_BASE + ord("x")])):
        if tok.encode(s).ids != want:
            raise SystemExit(f"tokenizer: {s!r} is {tok.encode(s).ids}, want {want}")


# ---- prompts ------------------------------------------------------------


def render(hf_tok, content):
    """The chat as the template renders it (one <start_of_image> per image)."""
    messages = [{"role": "user", "content": content}]
    return hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def expand(rendered):
    """Each image's soft-token run, as transformers' Gemma3Processor writes it."""
    return rendered.replace("<start_of_image>", IMAGE_SEQUENCE)


def soft_token_spans(ids):
    """[start, end) of each run of <image_soft_token>, in order."""
    spans, start = [], None
    for i, t in enumerate(ids + [None]):
        if t == IMAGE_TOKEN and start is None:
            start = i
        elif t != IMAGE_TOKEN and start is not None:
            spans.append([start, i])
            start = None
    for s, e in spans:
        if e - s != TOKENS or ids[s - 1] != BOI or ids[e] != EOI:
            raise SystemExit(f"soft-token run [{s}, {e}) is not one whole image")
    return spans


def check_against_processor(hf_tok, image_proc, rendered, images, ids, spans):
    """transformers' own Gemma3Processor, given the rendered chat, must give
    the same ids, and its token_type_ids must mark exactly the spans."""
    proc = Gemma3Processor(image_processor=image_proc, tokenizer=hf_tok, image_seq_length=TOKENS)
    out = proc(text=rendered, images=[images] if images else None, return_tensors="np")
    types = np.zeros(len(ids), dtype=np.int64)
    for s, e in spans:
        types[s:e] = 1
    if out["input_ids"][0].tolist() != ids or not np.array_equal(out["token_type_ids"][0], types):
        raise SystemExit("transformers' Gemma3Processor tokenizes the chat differently")


# ---- language model -----------------------------------------------------


def visible(n, spans, window=None, bidirectional=True):
    """[query, key] booleans: causal (and within the window for a sliding
    layer), or both soft tokens of the same image."""
    q = np.arange(n)[:, None]
    k = np.arange(n)[None, :]
    see = k <= q
    if window is not None:
        see &= q - k < window
    if bidirectional:
        image = np.full(n, -1)
        for g, (s, e) in enumerate(spans):
            image[s:e] = g
        see |= (image[:, None] == image[None, :]) & (image[:, None] >= 0)
    return see


def check_window_rules(n, spans):
    """transformers 5.24 builds a sliding layer's mask as window AND (causal
    OR same image), visible() as (window AND causal) OR same image. They
    agree when each image fits in the window, as SLIDING_WINDOW ensures."""
    q = np.arange(n)[:, None]
    k = np.arange(n)[None, :]
    if not np.array_equal((q - k < SLIDING_WINDOW) & visible(n, spans), visible(n, spans, SLIDING_WINDOW)):
        raise SystemExit("the two sliding-window mask rules differ")


def additive(see):
    return mx.array(np.where(see, 0.0, -np.inf).astype(np.float32))


def lm_logits(lm, ids, spans, soft, bidirectional=True):
    """Logits at every position, transformers' way, through mlx-vlm's layers.

    soft holds one [TOKENS, hidden] array per span, written unscaled over the
    scaled text embeddings."""
    scale = TEXT_HIDDEN ** 0.5
    assert scale == 8.0  # so mlx-vlm's bfloat16 rounding of it is moot
    h = np.array(lm.model.embed_tokens(mx.array(ids))) * np.float32(scale)
    for (s, e), tokens in zip(spans, soft):
        h[s:e] = tokens
    masks = {  # by Attention.is_sliding
        True: additive(visible(len(ids), spans, SLIDING_WINDOW, bidirectional)),
        False: additive(visible(len(ids), spans, None, bidirectional)),
    }
    x = mx.array(h)[None]
    for layer in lm.model.layers:
        x = layer(x, masks[layer.self_attn.is_sliding], None)
    logits = lm.lm_head(lm.model.norm(x))[0]
    mx.eval(logits)
    return np.array(logits)


def mlx_vlm_native(model, ids, images, pixels):
    """What mlx-vlm 0.7.10 itself computes for the prompt, for comparison
    only: its multimodal embeddings, then its language model as its
    generate calls it (no mask argument, so causal masks)."""
    x = mx.array([ids])
    # get_input_embeddings needs the padding mask to build a 4D mask that
    # generate then leaves unused.
    pv = mx.array(pixels[images]) if images else None
    emb = model.get_input_embeddings(x, pv, mask=mx.ones(x.shape)).inputs_embeds
    out = model.language_model(x, inputs_embeds=emb).logits[0]
    mx.eval(out)
    return np.array(out)


def max_diff(a, b):
    return float(np.max(np.abs(a - b)))


def build_cases(d, model, soft, pil, pixels, image_proc):
    """Tokenize the chats, write each case's logits, run the checks."""
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    check_tokenizer(tok)
    hf_tok = AutoTokenizer.from_pretrained(str(d))
    lm = model.language_model
    cases, results = [], {}
    for name, content in CASES.items():
        rendered = render(hf_tok, content)
        prompt_text = expand(rendered)
        ids = tok.encode(prompt_text, add_special_tokens=False).ids
        if ids[0] != BOS or ids.count(BOS) != 1:
            raise SystemExit(f"{name}: want exactly one <bos>, first")
        spans = soft_token_spans(ids)
        check_window_rules(len(ids), spans)
        images = list(range(len(spans)))  # image parts take image0, image1 in order
        check_against_processor(hf_tok, image_proc, rendered, [pil[i] for i in images], ids, spans)
        logits = lm_logits(lm, ids, spans, [soft[i] for i in images])
        file = f"logits_{name}.f32"
        last = int(np.argmax(logits[-1]))
        cases.append({
            "name": name, "prompt": prompt_text, "ids": ids, "images": images, "spans": spans,
            "logits": {"file": file, "shape": f32(d / file, logits), "dtype": "float32-le"},
            "last_argmax": last, "last_argmax_token": tok.id_to_token(last),
        })
        results[name] = (ids, spans, images, logits)
    return cases, sanity_checks(model, soft, pixels, results)


def sanity_checks(model, soft, pixels, results):
    """The figures that say the fixtures exercise what they are for."""
    lm = model.language_model
    ids, _, _, logits = results["text_only"]
    plain = np.array(lm(mx.array([ids])).logits[0])
    ids, spans, images, logits1 = results["one_image"]
    (s, e), = spans
    causal = lm_logits(lm, ids, spans, [soft[0]], bidirectional=False)
    swapped = lm_logits(lm, ids, spans, [soft[1]])
    native = mlx_vlm_native(model, ids, images, pixels)
    checks = {
        "text_only_vs_mlx_vlm_forward_max_abs_diff": max_diff(logits, plain),
        "one_image_causal_only_max_abs_diff_before_image": max_diff(causal[:s], logits1[:s]),
        "one_image_causal_only_max_abs_diff_in_image": max_diff(causal[s:e], logits1[s:e]),
        "one_image_causal_only_max_abs_diff_after_image": max_diff(causal[e:], logits1[e:]),
        "one_image_swapped_image_last_max_abs_diff": max_diff(swapped[-1], logits1[-1]),
        "one_image_swapped_image_last_argmax": int(np.argmax(swapped[-1])),
        "mlx_vlm_native_path_max_abs_diff": max_diff(native, logits1),
        "mlx_vlm_native_path_last_max_abs_diff": max_diff(native[-1], logits1[-1]),
    }
    if checks["text_only_vs_mlx_vlm_forward_max_abs_diff"] > 1e-5:
        raise SystemExit(f"text_only: not mlx-vlm's forward: {checks}")
    if checks["one_image_causal_only_max_abs_diff_in_image"] < 1e-3:
        raise SystemExit(f"one_image: the bidirectional mask changes nothing: {checks}")
    if checks["one_image_swapped_image_last_max_abs_diff"] < 1e-3:
        raise SystemExit(f"one_image: the image does not reach the last position: {checks}")
    return checks


# ---- main ---------------------------------------------------------------


def write_checkpoint(d):
    """model.safetensors, the configs and the tokenizer; returns the params."""
    cfg = gemma3.ModelConfig.from_dict(CONFIG)
    cfg.text_config = gemma3.TextConfig.from_dict(TEXT_CONFIG)
    cfg.vision_config = gemma3.VisionConfig.from_dict(VISION_CONFIG)
    params = random_params(gemma3.Model(cfg), np.random.default_rng(SEED))
    save_file(hf_names(params), str(d / "model.safetensors"), metadata={"format": "pt"})
    os.chmod(d / "model.safetensors", 0o644)
    tok, tok_cfg = tokenizer_files()
    for name, obj in (("config.json", CONFIG), ("preprocessor_config.json", PREPROCESSOR),
                      ("tokenizer.json", tok), ("tokenizer_config.json", tok_cfg)):
        write_json(d / name, obj)
    return params


def load_reference(d, params):
    """The checkpoint as mlx-vlm loads it from disk, checked against params."""
    model = load_model(d, strict=True)
    model.set_dtype(mx.float32)
    loaded = dict(tree_flatten(model.parameters()))
    for name, v in params.items():
        if not np.array_equal(np.array(loaded[name]), v):
            raise SystemExit(f"{name}: mlx-vlm loaded other values")
    return model


def tower(model, pixels):
    """Vision features and soft tokens, as get_input_embeddings computes them."""
    x = mx.array(pixels).transpose(0, 2, 3, 1).astype(mx.float32)
    hidden, _, _ = model.vision_tower(x, output_hidden_states=True)
    soft = model.multi_modal_projector(hidden)
    mx.eval(hidden, soft)
    return np.array(hidden), np.array(soft)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata/ref/gemma3_vlm_tiny")
    args = ap.parse_args()
    mx.set_default_device(mx.cpu)
    d = pathlib.Path(args.out)
    d.mkdir(parents=True, exist_ok=True)

    params = write_checkpoint(d)
    model = load_reference(d, params)

    images = make_images()
    for i, img in enumerate(images):
        img.tofile(d / f"image{i}.rgb")
    pil = [Image.fromarray(img) for img in images]
    proc = AutoImageProcessor.from_pretrained(str(d), use_fast=False)
    pixels = np.asarray(proc(images=pil, return_tensors="np")["pixel_values"])
    bicubic = np.asarray(proc(images=pil[1:], resample=3, return_tensors="np")["pixel_values"])

    features, soft = tower(model, pixels)
    # The same with the final LayerNorm at the config's eps, as transformers
    # computes it.
    post = model.vision_tower.vision_model.post_layernorm
    shipped_eps = post.eps
    post.eps = VISION_CONFIG["layer_norm_eps"]
    features_hf_eps, soft_hf_eps = tower(model, pixels)
    post.eps = shipped_eps

    cases, checks = build_cases(d, model, soft, pil, pixels, proc)

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
            "tokenizers": version("tokenizers"), "pillow": version("pillow"), "numpy": np.__version__,
            "device": str(mx.default_device()), "dtype": "float32", "image_processor": type(proc).__name__,
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
            "cases": "logits [tokens, vocab] at every position, transformers' Gemma 3 semantics: text embeddings "
                     "scaled by sqrt(hidden), soft tokens unscaled at the spans; causal masks (sliding window %d) "
                     "opened both ways between the soft tokens of one image; images index image0/image1, "
                     "spans are [start, end) per image in order" % SLIDING_WINDOW,
        },
        "post_layernorm_eps_effect": {
            "mlx_vlm_eps": shipped_eps,
            "config_eps": VISION_CONFIG["layer_norm_eps"],
            "vision_features_max_abs_diff": float(np.max(np.abs(features - features_hf_eps))),
            "soft_tokens_max_abs_diff": float(np.max(np.abs(soft - soft_hf_eps))),
        },
        "cases": cases,
        "checks": checks,
        "params": int(sum(v.size for v in params.values())),
    }
    write_json(d / "fixture.json", fixture, indent=1)
    total = sum(p.stat().st_size for p in d.iterdir() if p.is_file())
    print(f"{d}: {fixture['params']} parameters, {total} bytes; features |max| {np.abs(features).max():.3g}, "
          f"soft tokens |max| {np.abs(soft).max():.3g}; post_layernorm eps effect "
          f"{fixture['post_layernorm_eps_effect']['vision_features_max_abs_diff']:.3g} / "
          f"{fixture['post_layernorm_eps_effect']['soft_tokens_max_abs_diff']:.3g}")
    for c in cases:
        print(f"  {c['name']}: {len(c['ids'])} tokens, spans {c['spans']}, last argmax {c['last_argmax']} "
              f"{c['last_argmax_token']!r}")
    for k, v in checks.items():
        print(f"  {k}: {v:.3g}" if isinstance(v, float) else f"  {k}: {v}")


if __name__ == "__main__":
    main()
