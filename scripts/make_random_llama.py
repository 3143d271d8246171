"""Writes a seeded random-weight llama checkpoint in MLX format, for
benchmarks at a realistic model size without real weights.

Both servers under comparison load the same directory: mlx-lm reads it
natively, ours through its HF/MLX loader. The weights are mlx-lm's own
initialisation of its llama module under a fixed seed, cast to float16 and
quantized with mlx-lm's quantize_model (affine, --bits, --group-size), so
the matmul shapes, bytes per weight and memory traffic are those of the
real model of that shape; the text it generates is noise.

Run with mlx and mlx-lm importable (`make mlx-lm` installs them here; on a
CUDA machine the mlx-cuda wheel):

    python3 scripts/make_random_llama.py --preset llama2-7b --out DIR \\
        --tokenizer path/to/llama2/tokenizer.json
"""

import argparse
import json
import shutil
import time
from pathlib import Path

import mlx.core as mx
from mlx_lm.models import llama
from mlx_lm.utils import quantize_model, save_config, save_model

PRESETS = {
    # The published Llama-2-7B shape.
    "llama2-7b": dict(hidden_size=4096, num_hidden_layers=32, intermediate_size=11008,
                      num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                      rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=4096),
    # A small shape to try the script on a CPU.
    "tiny": dict(hidden_size=256, num_hidden_layers=2, intermediate_size=512,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=32000,
                 rms_norm_eps=1e-5, rope_theta=10000.0, max_position_embeddings=2048),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="llama2-7b")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json whose vocabulary fits the preset's")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = dict(model_type="llama", architectures=["LlamaForCausalLM"], tie_word_embeddings=False,
                  bos_token_id=1, eos_token_id=2, torch_dtype="float16", **PRESETS[args.preset])
    vocab = json.load(open(args.tokenizer, encoding="utf-8"))["model"]["vocab"]
    if len(vocab) > config["vocab_size"]:
        raise SystemExit(f"tokenizer has {len(vocab)} tokens, the preset {config['vocab_size']}")

    t0 = time.time()
    mx.random.seed(args.seed)
    model = llama.Model(llama.ModelArgs.from_dict(config))
    model.set_dtype(mx.float16)
    mx.eval(model.parameters())
    model, config = quantize_model(model, config, args.group_size, args.bits)
    mx.eval(model.parameters())
    save_model(out, model, donate_model=True)
    save_config(config, out / "config.json")
    shutil.copy(args.tokenizer, out / "tokenizer.json")
    with open(out / "tokenizer_config.json", "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "add_bos_token": True, "model_max_length": config["max_position_embeddings"]}, f, indent=2)
    size = sum(p.stat().st_size for p in out.glob("*.safetensors"))
    print(f"wrote {out}: {args.preset}, {args.bits}-bit groups of {args.group_size}, "
          f"{size / 1e9:.2f} GB of weights in {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
