"""Writes a Llama-3-style byte-level BPE tokenizer.json (and tokenizer_config.json) for the
end-to-end tests, without the `tokenizers` package: a plain BPE trained here on the given
files (most frequent pair first, ties by the pair), the Llama 3 pre-tokenizer (its Split
regex, then ByteLevel), <|begin_of_text|> by the post-processor's template. The ids it
gives are checked against Hugging Face's in tests/reference/test_hf_tokenizer.sh; here it
only needs to be a valid, non-trivial file.

usage: make_tokenizer.py OUT_DIR MERGES FILE... [--model-type T] [--specials BOS,EOS,...]
"""
import argparse
import collections
import json
import re

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def byte_alphabet():
    shown = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in shown:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("merges", type=int)
    p.add_argument("files", nargs="+")
    p.add_argument("--model-type", default="BPE")
    p.add_argument("--specials", default="<|begin_of_text|>,<|end_of_text|>")
    a = p.parse_args()
    alpha = byte_alphabet()
    words = collections.Counter()
    for f in a.files:
        text = open(f, "rb").read().decode("utf-8", errors="replace")
        for w in re.findall(r" ?\w+| ?[^\w\s]+|\s+", text):
            words[tuple(alpha[b] for b in w.encode())] += 1
    vocab = {alpha[b]: b for b in range(256)}
    merges = []
    for _ in range(a.merges):
        pairs = collections.Counter()
        for w, n in words.items():
            for x, y in zip(w, w[1:]):
                pairs[x, y] += n
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(f"{best[0]} {best[1]}")
        vocab.setdefault(best[0] + best[1], len(vocab))
        merged = collections.Counter()
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    specials = a.specials.split(",")
    added = [{"id": len(vocab) + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate(specials)]
    bos = added[0]["id"]
    tok = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": specials[0], "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [], "special_tokens": {specials[0]: {"id": specials[0], "ids": [bos],
                                                                        "tokens": [specials[0]]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": a.model_type, "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }
    with open(f"{a.out}/tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    print(f"{a.out}/tokenizer.json: {len(vocab) + len(added)} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
