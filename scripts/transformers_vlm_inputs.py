#!/usr/bin/env python3
"""The model inputs HF transformers' own processors make for the tiny VLM fixtures.

For every logits case of testdata/ref/gemma3_vlm_tiny/ and
testdata/ref/gemma4_vlm_tiny/ this runs transformers' processor classes on
the case's chat and media and saves what they return, as numpy arrays, for
scripts/transformers_vlm_reference.py to feed to the models (on a machine
with torch, a GPU if there is one). Nothing here needs a GPU.

The chats, images and video are the fixture scripts' own (imported from
make_tiny_gemma3_vlm.py and make_tiny_gemma4_vlm.py: CASES, render,
make_images, make_video, the processor settings), rendered with the
checkpoints' chat templates by transformers' apply_chat_template, then:

    Gemma 3  Gemma3Processor(Gemma3ImageProcessorPil, the tokenizer,
             image_seq_length 16), as the fixture script builds it:
             input_ids, attention_mask, token_type_ids, pixel_values
             [images, 3, 112, 112]
    Gemma 4  Gemma4Processor(Gemma4AudioFeatureExtractor,
             Gemma4ImageProcessorPil, the tokenizer, Gemma4VideoProcessor,
             image_seq_length 70) with the processor config's settings:
             input_ids, attention_mask, mm_token_type_ids, pixel_values
             [images, 630, 48] and image_position_ids [images, 630, 2]
             (padded to the budget's 630 patches, padding at (-1, -1)),
             or for the video pixel_values_videos, video_position_ids and
             num_frames_per_video; the video's two frames are passed as
             already sampled (do_sample_frames False) with their frame
             rate (1/70 fps), so the processor writes 00:00 and 01:10

Gemma4Processor cannot be built without its video processor, which
imports torch and torchvision, so this script needs both (the CPU is
enough) beside .deps/pyvlm.

The script stops unless every case's input_ids equal fixture.json's ids,
its token types mark exactly the fixture's spans (1 for images, 2 for
video frames), and the PIL-backend pixels equal the fixture's own
(pixel_values.f32 for Gemma 3, pixel_values_N.f32 for Gemma 4) exactly.

Cases written (NAME.npz, the arrays under the forward() argument names):

    gemma3_vlm_tiny  text_only, one_image, two_images: the PIL image
                     backend, the pixels the fixtures used;
                     one_image.torchvision, two_images.torchvision: the
                     same through Gemma3ImageProcessor (the torchvision
                     backend, transformers' default when torchvision is
                     installed), whose resize differs by a grey level here
                     and there
    gemma4_vlm_tiny  text_only, one_image, two_images, and their
                     .torchvision variants likewise; one_image_causal: the
                     one_image inputs, run with use_bidirectional_attention
                     unset (every layer causal); video: the ids and
                     token types of transformers' processor with each
                     frame's patches from Gemma4ImageProcessorPil (the
                     fixture's preprocessing: PIL bicubic);
                     video.torchvision: everything from transformers'
                     processor, frames resized by Gemma4VideoProcessor
                     (torchvision, antialiased bicubic)

manifest.json lists, per fixture, the checkpoint directory, the model
class, and per case its file, the fixture case whose logits it is compared
with, the config overrides to apply, the preprocessing, and the largest
difference of its pixels from the fixture's preprocessing; with the
versions used.

Usage, from the repository root (torch and torchvision from PyPI, CPU use
only, e.g. python3 -m pip install --target .deps/pytorch torch==2.11.0
torchvision==0.26.0):

    PYTHONPATH=.deps/pyvlm:.deps/pytorch python3 scripts/transformers_vlm_inputs.py --out DIR
"""

import argparse
import json
import pathlib
from importlib.metadata import version

import numpy as np
from PIL import Image
from transformers import AutoImageProcessor, AutoTokenizer
from transformers.models.gemma3.processing_gemma3 import Gemma3Processor
from transformers.models.gemma4.feature_extraction_gemma4 import Gemma4AudioFeatureExtractor
from transformers.models.gemma4.image_processing_gemma4 import Gemma4ImageProcessor
from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil
from transformers.models.gemma4.processing_gemma4 import Gemma4Processor
from transformers.models.gemma4.video_processing_gemma4 import Gemma4VideoProcessor
from transformers.video_utils import VideoMetadata

import make_tiny_gemma3_vlm as g3
import make_tiny_gemma4_vlm as g4

ROOT = pathlib.Path(__file__).resolve().parent.parent
G3 = "testdata/ref/gemma3_vlm_tiny"
G4 = "testdata/ref/gemma4_vlm_tiny"


def load_fixture(d):
    fx = json.loads((ROOT / d / "fixture.json").read_text())
    return {c["name"]: c for c in fx["cases"]}, fx


def as_arrays(out):
    """The processor's BatchFeature as plain numpy arrays."""
    return {k: np.asarray(v) for k, v in out.items()}


def check_ids(fixture, case, arrays, kind, type_value):
    """input_ids must be the fixture's and the token types its spans."""
    ids = arrays["input_ids"][0].tolist()
    if ids != fixture["ids"]:
        raise SystemExit(f"{case}: transformers' processor gives other ids than fixture.json's")
    types = np.zeros(len(ids), dtype=np.int64)
    for s, e in fixture["spans"]:
        types[s:e] = type_value
    if not np.array_equal(arrays[kind][0], types):
        raise SystemExit(f"{case}: {kind} do not mark fixture.json's spans")


def max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) if np.size(a) else 0.0


def entry(name, compare, file, preprocessing, pixel_diff=None, overrides=None):
    # Cases whose pixels are not the fixture's are compared for information
    # only: their logits are expected to move with the pixels.
    e = {"name": name, "compare_with": compare, "file": file, "preprocessing": preprocessing,
         "same_pixels_as_fixture": not name.endswith(".torchvision")}
    if pixel_diff is not None:
        e["pixels_max_abs_diff_vs_fixture_preprocessing"] = pixel_diff
    if overrides:
        e["text_config_overrides"] = overrides
    return e


def gemma3_cases(out):
    cases, fx = load_fixture(G3)
    d = ROOT / G3
    tok = AutoTokenizer.from_pretrained(d)
    pil = [Image.fromarray(a) for a in g3.make_images()]
    ref_pixels = np.fromfile(d / "pixel_values.f32", dtype="<f4").reshape(fx["tensors"]["pixel_values"]["shape"])
    backends = {"pil": AutoImageProcessor.from_pretrained(d, backend="pil"),
                "torchvision": AutoImageProcessor.from_pretrained(d, backend="torchvision")}
    entries = []
    for name, content in g3.CASES.items():
        rendered = g3.render(tok, content)
        n = rendered.count("<start_of_image>")
        for backend, image_proc in backends.items():
            if backend != "pil" and n == 0:
                continue
            proc = Gemma3Processor(image_processor=image_proc, tokenizer=tok, image_seq_length=g3.TOKENS)
            arrays = as_arrays(proc(text=rendered, images=[pil[:n]] if n else None, return_tensors="np"))
            check_ids(cases[name], name, arrays, "token_type_ids", 1)
            diff = None
            if n:
                if cases[name]["images"] != list(range(n)):
                    raise SystemExit(f"{name}: the fixture's images are not image0.. in order")
                diff = max_diff(arrays["pixel_values"], ref_pixels[:n])
                if backend == "pil" and diff != 0:
                    raise SystemExit(f"{name}: PIL-backend pixels differ from pixel_values.f32 by {diff}")
            case = name if backend == "pil" else f"{name}.{backend}"
            np.savez(out / f"{case}.npz", **arrays)
            entries.append(entry(case, name, f"{case}.npz",
                                 f"Gemma3Processor, {type(image_proc).__name__}" if n else "Gemma3Processor", diff))
    return {"checkpoint": G3, "model_class": "Gemma3ForConditionalGeneration", "cases": entries}


def gemma4_processor(tok, image_proc):
    return Gemma4Processor(feature_extractor=Gemma4AudioFeatureExtractor(), image_processor=image_proc,
                           tokenizer=tok, video_processor=Gemma4VideoProcessor(**g4.video_processor_kwargs()),
                           image_seq_length=g4.BUDGET)


def gemma4_reference_patches(fx, i):
    d = ROOT / G4
    return np.fromfile(d / f"pixel_values_{i}.f32", dtype="<f4").reshape(fx["tensors"][f"pixel_values_{i}"]["shape"])


def real_patches(pixels, positions):
    """Per item, the patches that are not padding."""
    return [p[(q != -1).all(axis=-1)] for p, q in zip(pixels, positions)]


def gemma4_cases(out):
    cases, fx = load_fixture(G4)
    d = ROOT / G4
    tok = AutoTokenizer.from_pretrained(d)
    pil = [Image.fromarray(a) for a in g4.make_images()]
    kw = g4.image_processor_kwargs()
    backends = {"pil": Gemma4ImageProcessorPil(**kw), "torchvision": Gemma4ImageProcessor(**kw)}
    entries = []
    for name, content in g4.CASES.items():
        rendered = g4.render(tok, content)
        n = rendered.count("<|image|>")
        for backend, image_proc in backends.items():
            if backend != "pil" and n == 0:
                continue
            arrays = as_arrays(gemma4_processor(tok, image_proc)(text=rendered, images=pil[:n] or None,
                                                                   return_tensors="np"))
            check_ids(cases[name], name, arrays, "mm_token_type_ids", 1)
            diff = None
            if n:
                if cases[name]["images"] != list(range(n)):
                    raise SystemExit(f"{name}: the fixture's images are not image0.. in order")
                got = real_patches(arrays["pixel_values"], arrays["image_position_ids"])
                diff = max(max_diff(p, gemma4_reference_patches(fx, i)) if p.shape == gemma4_reference_patches(fx, i).shape
                           else float("inf") for i, p in enumerate(got))
                if backend == "pil" and diff != 0:
                    raise SystemExit(f"{name}: PIL-backend patches differ from pixel_values_N.f32 by {diff}")
            case = name if backend == "pil" else f"{name}.{backend}"
            np.savez(out / f"{case}.npz", **arrays)
            what = f"Gemma4Processor, {type(image_proc).__name__}" if n else "Gemma4Processor"
            entries.append(entry(case, name, f"{case}.npz", what, diff))
            if name == "one_image" and backend == "pil":
                # transformers' masks when the setting is absent: every layer causal.
                entries.append(entry("one_image_causal", "one_image_causal", f"{case}.npz", what, diff,
                                     {"use_bidirectional_attention": None}))

    # The video: transformers' processor on the two frames as sampled.
    frames = g4.make_video()
    video = [v for v in fx["videos"] if v["file"] == "video0.rgb"][0]
    rendered = g4.render(tok, [g4.VIDEO, g4.text_part("What happens?")])
    meta = VideoMetadata(total_num_frames=len(frames), fps=g4.VIDEO_FPS, frames_indices=list(range(len(frames))),
                         width=frames.shape[2], height=frames.shape[1])
    arrays = as_arrays(gemma4_processor(tok, backends["pil"])(
        text=rendered, videos=[frames], video_metadata=[meta], do_sample_frames=False, return_tensors="np"))
    check_ids(cases["video"], "video", arrays, "mm_token_type_ids", 2)
    # Each frame through the PIL image processor: the fixture's frames.
    per_frame = as_arrays(backends["pil"](images=[Image.fromarray(f) for f in frames], return_tensors="np"))
    if not np.array_equal(per_frame["image_position_ids"], arrays["video_position_ids"]):
        raise SystemExit("video: the image processor's frame grid is not the video processor's")
    if list(per_frame["num_soft_tokens_per_image"]) != [video["tokens_per_frame"]] * len(frames):
        raise SystemExit("video: the frames' soft-token count is not the fixture's")
    tv_diff = max_diff(arrays["pixel_values_videos"], per_frame["pixel_values"])
    np.savez(out / "video.torchvision.npz", **arrays)
    pil_arrays = dict(arrays, pixel_values_videos=per_frame["pixel_values"].astype(np.float32))
    np.savez(out / "video.npz", **pil_arrays)
    entries.append(entry("video", "video", "video.npz",
                         "Gemma4Processor for ids and token types; frames through Gemma4ImageProcessorPil"))
    entries.append(entry("video.torchvision", "video", "video.torchvision.npz",
                         "Gemma4Processor, Gemma4VideoProcessor", tv_diff))
    return {"checkpoint": G4, "model_class": "Gemma4ForConditionalGeneration", "cases": entries}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=pathlib.Path, required=True, help="folder for the inputs and manifest.json")
    args = ap.parse_args()
    fixtures = {}
    for key, fn in (("gemma3_vlm_tiny", gemma3_cases), ("gemma4_vlm_tiny", gemma4_cases)):
        sub = args.out / key
        sub.mkdir(parents=True, exist_ok=True)
        fixtures[key] = fn(sub)
    manifest = {
        "generator": "scripts/transformers_vlm_inputs.py",
        "versions": {p: version(p) for p in ("transformers", "tokenizers", "pillow", "numpy", "torch", "torchvision")},
        "fixtures": fixtures,
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    for key, f in fixtures.items():
        for c in f["cases"]:
            extra = c.get("pixels_max_abs_diff_vs_fixture_preprocessing")
            print(f"{key}/{c['name']}: {c['preprocessing']}" + ("" if extra is None else f"; pixels vs the fixture's {extra:.3g}"))


if __name__ == "__main__":
    main()
