"""Hugging Face `tokenizers` side of tests/reference/test_hf_tokenizer.sh.

train:   trains a byte-level BPE tokenizer.json on a corpus with `tokenizers` itself, in
         the style of one model family (its pre-tokenizer, normalizer, special tokens and
         post-processor), plus a tokenizer_config.json naming BOS and EOS for the families
         that ship one.
compare: encodes every document of a pack's inputs with `tokenizers` and compares every
         id with the dataset flexsp packed from them (documents in order, BOS first with
         --bos, EOS last, empty documents skipped).
Exit status 1 with the first difference when any id differs.
"""
import argparse
import json
import sys

import h5py
import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def read_text(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", errors="replace")


def train(a):
    tok = Tokenizer(models.BPE(ignore_merges=a.family == "llama3"))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if a.family == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=a.prefix_space)
        specials = ["<|endoftext|>"]
    else:
        pattern = LLAMA3 if a.family == "llama3" else QWEN
        split = pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False)
        tok.pre_tokenizer = pre_tokenizers.Sequence([split, byte_level])
        specials = (["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"] if a.family == "llama3"
                    else ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    if a.family == "qwen":
        tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator((text for _, text in documents(a.files)), trainer)
    if a.family == "llama3":
        bos = tok.token_to_id("<|begin_of_text|>")
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
        # Added tokens with every matching option, met in the test's own text.
        tok.add_tokens([AddedToken("flexsp", single_word=True), AddedToken("<tab>", lstrip=True, rstrip=True),
                        AddedToken("Ünïcode", normalized=True)])
        tok.add_special_tokens([AddedToken("<|reserved_0|>", special=True)])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.save(f"{a.out}/tokenizer.json")
    config = {"gpt2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
              "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}}.get(a.family)
    if config:
        with open(f"{a.out}/tokenizer_config.json", "w") as f:
            json.dump(config, f)
    print(f"trained {a.family}: vocab {tok.get_vocab_size()}")


def documents(files):
    """The texts of the documents pack makes of these files, in order."""
    for path in files:
        if path.endswith(".jsonl"):
            with open(path, encoding="utf-8", newline="\n") as f:
                for line in f:
                    if line.strip(" \t\r\n"):
                        yield f"{path} line", json.loads(line)["text"]
        else:
            yield path, read_text(path)


def compare(a):
    tok = Tokenizer.from_file(a.tokenizer)
    eos, bos = a.eos, a.bos
    with h5py.File(a.dataset, "r") as f:
        tokens = f["tokens"][:].astype(np.int64)
        offsets = f["offsets"][:]
    named = list(documents(a.files))
    encs = tok.encode_batch([t for _, t in named], add_special_tokens=False)
    d = n_ids = 0
    for (name, _), enc in zip(named, encs):
        ids = enc.ids
        if not ids:
            continue
        want = ([bos] if bos >= 0 else []) + ids + [eos]
        if d + 1 >= len(offsets):
            sys.exit(f"FAIL: the dataset has {d} documents, tokenizers makes more ({name})")
        got = tokens[offsets[d]:offsets[d + 1]].tolist()
        if got != want:
            i = next((k for k in range(min(len(got), len(want))) if got[k] != want[k]), min(len(got), len(want)))
            sys.exit(f"FAIL: document {d} ({name}): first difference at token {i}: flexsp {got[i:i + 8]}"
                     f" vs tokenizers {want[i:i + 8]} ({tok.decode(want[max(0, i - 4):i + 4])!r})")
        d += 1
        n_ids += len(want)
    if d + 1 != len(offsets):
        sys.exit(f"FAIL: the dataset has {len(offsets) - 1} documents, tokenizers makes {d}")
    chars = sum(len(t) for _, t in named)
    print(f"ok: {d} documents, {n_ids} ids, {chars} characters: every id equal")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--family", choices=["llama3", "gpt2", "qwen"], required=True)
    t.add_argument("--vocab", type=int, default=4000)
    t.add_argument("--prefix-space", action="store_true")
    t.add_argument("--out", required=True)
    t.add_argument("files", nargs="+")
    c = sub.add_parser("compare")
    c.add_argument("--tokenizer", required=True)
    c.add_argument("--dataset", required=True)
    c.add_argument("--bos", type=int, default=-1)
    c.add_argument("--eos", type=int, required=True)
    c.add_argument("files", nargs="+")
    a = p.parse_args()
    train(a) if a.cmd == "train" else compare(a)


if __name__ == "__main__":
    main()
