#!/usr/bin/env python3
"""Reference distributions of the sampling chain, for sample/testdata.

For each case of fixed logits, sampling knobs and token history it writes
the probabilities the chain leaves (over the whole vocabulary, zero for the
tokens it drops), computed here with NumPy from the definitions:

  logit_bias      add the bias to the token's logit (OpenAI)
  penalties       repetition_penalty over the distinct tokens of the last 64
                  of prompt + generated (divide a positive logit, multiply
                  the others: HF, llama.cpp); then frequency/presence over
                  the generated tokens: logit -= count*freq + presence
                  (OpenAI)
  top_k           keep the k largest logits (ties: lower id)
  top_p           softmax at temperature 1, sorted descending, keep the
                  shortest prefix whose cumulative sum reaches p
  min_p           keep logits >= max + ln(min_p)
  temperature     softmax(logits / T) over the survivors; T = 0 (or
                  top_k = 1) is the argmax, lowest id on ties

in llama.cpp's default sampler order (common/common.h: penalties, top_k,
top_p, min_p, temperature; logit_bias ahead of the chain in
common/sampling.cpp).

Run with NumPy on the path, e.g.

    python3 -m pip install --target .deps/py-numpy numpy
    PYTHONPATH=.deps/py-numpy python3 scripts/sampling_reference.py > sample/testdata/chain.json
"""
import json
from collections import Counter

import numpy as np

WINDOW = 64

LOGITS = [2.5, 1.0, 3.25, -0.5, 0.75, 3.25, -2.0, 1.5, 0.0, -1.25, 2.0, 0.5, -3.0, 1.75, 0.25, -0.75]
V = len(LOGITS)


def chain(p, prompt, generated):
    v = np.asarray(LOGITS, dtype=np.float32).astype(np.float64)
    for tok, b in p.get("logit_bias", []):
        v[tok] += b
    rep = p.get("repetition_penalty", 0)
    if rep not in (0, 1):
        for t in sorted(set((prompt + generated)[-WINDOW:])):
            v[t] = v[t] / rep if v[t] > 0 else v[t] * rep
    for t, c in Counter(generated).items():
        v[t] -= c * p.get("frequency_penalty", 0) + p.get("presence_penalty", 0)
    ids = np.arange(V)
    temp, top_k = p.get("temperature", 0), p.get("top_k", 0)
    out = np.zeros(V)
    if temp == 0 or top_k == 1:
        out[int(np.argmax(v))] = 1
        return out
    order = np.lexsort((ids, -v))  # descending logit, lower id first
    kept = order
    if 0 < top_k < V:
        kept = kept[:top_k]
    top_p = p.get("top_p", 1)
    if 0 < top_p < 1:
        e = np.exp(v[kept] - v[kept].max())
        cum = np.cumsum(e / e.sum())
        kept = kept[: int(np.argmax(cum >= top_p)) + 1]
    min_p = p.get("min_p", 0)
    if min_p > 0:
        kept = kept[v[kept] >= v[kept].max() + np.log(min_p)]
    e = np.exp((v[kept] - v[kept].max()) / temp)
    out[kept] = e / e.sum()
    return out


# A 70-token prompt: its first six tokens fall out of the window.
LONG_PROMPT = [12, 6, 3, 9, 15, 1] + [8] * 64

CASES = [
    ("temperature 1", {"temperature": 1}, [], []),
    ("temperature 0.5", {"temperature": 0.5}, [], []),
    ("temperature 2, top_k 3", {"temperature": 2, "top_k": 3}, [], []),
    ("top_k 2", {"temperature": 1, "top_k": 2}, [], []),
    ("top_k 4 splits a tie by id", {"temperature": 1, "top_k": 4, "logit_bias": [[13, 0.25]]}, [], []),
    ("top_k 4", {"temperature": 1, "top_k": 4}, [], []),
    ("top_p 0.8", {"temperature": 1, "top_p": 0.8}, [], []),
    ("top_p 0.8 cuts before temperature 0.4", {"temperature": 0.4, "top_p": 0.8}, [], []),
    ("top_p 0.95 at temperature 3", {"temperature": 3, "top_p": 0.95}, [], []),
    ("min_p 0.1", {"temperature": 1, "min_p": 0.1}, [], []),
    ("min_p 0.3 at temperature 1.5", {"temperature": 1.5, "min_p": 0.3}, [], []),
    ("top_k 6, top_p 0.9, min_p 0.05, temperature 0.8",
     {"temperature": 0.8, "top_k": 6, "top_p": 0.9, "min_p": 0.05}, [], []),
    ("logit_bias", {"temperature": 1, "logit_bias": [[0, -100], [6, 4.5], [12, 100]]}, [], []),
    ("logit_bias then top_k", {"temperature": 0.7, "top_k": 3, "logit_bias": [[2, -1], [8, 3.1]]}, [], []),
    ("presence and frequency", {"temperature": 1, "presence_penalty": 0.5, "frequency_penalty": 0.3},
     [2, 5, 7], [2, 2, 5, 10]),
    ("negative presence and frequency", {"temperature": 1, "presence_penalty": -1, "frequency_penalty": -0.5},
     [], [3, 3, 9]),
    ("repetition 1.3 over prompt and output", {"temperature": 1, "repetition_penalty": 1.3},
     [0, 3, 6], [2, 9]),
    ("repetition window drops old prompt tokens", {"temperature": 1, "repetition_penalty": 1.8},
     LONG_PROMPT, [5]),
    ("repetition below 1 favours repeats", {"temperature": 1, "repetition_penalty": 0.5},
     [1, 4], []),
    ("penalties then top_p and min_p", {"temperature": 0.9, "top_p": 0.9, "min_p": 0.1,
                                        "repetition_penalty": 1.2, "frequency_penalty": 0.4,
                                        "presence_penalty": 0.2},
     [2, 0, 10], [5, 5, 13, 2]),
    ("everything", {"temperature": 1.2, "top_k": 8, "top_p": 0.85, "min_p": 0.02,
                    "repetition_penalty": 1.1, "frequency_penalty": 0.6, "presence_penalty": -0.3,
                    "logit_bias": [[3, 2.5], [5, -1.5], [14, 1]]},
     [0, 1, 2, 3, 4], [3, 3, 7]),
    ("greedy follows the bias", {"temperature": 0, "logit_bias": [[7, 2]]}, [], []),
    ("top_k 1 follows the penalties", {"temperature": 1, "top_k": 1, "presence_penalty": 2}, [], [2, 5]),
]


def main():
    cases = []
    for name, params, prompt, generated in CASES:
        probs = chain(params, prompt, generated)
        cases.append({"name": name, "params": params, "prompt": prompt, "generated": generated,
                      "probs": [float(x) for x in probs]})
    print(json.dumps({"logits": LOGITS, "window": WINDOW, "cases": cases}, indent=1))


if __name__ == "__main__":
    main()
