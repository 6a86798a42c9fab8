"""HuggingFace transformers' LlamaForCausalLM on a test case, written like llama_ref.py.

  PYTHON tests/reference/hf_llama.py --weights W.h5 --batch B.h5 --out O.h5 [--dtype float64]
      [--save-pretrained DIR]
  PYTHON tests/reference/hf_llama.py --from-pretrained DIR --batch B.h5 --out O.h5 [...]

PYTHON is a python that can import transformers (tests/reference/test_transformers.sh
makes one: a virtual environment over Debian's python3-torch). W.h5 and B.h5 come from
make_case.py. transformers has no packed variable-length batch, so each sequence of B.h5
runs alone (positions from 0, causal); the loss is the sum of next-token cross-entropies
over every sequence divided by their count, the definition of docs/batches.md, and the
gradients are those of that loss. The weights are loaded with strict=True: every HF
parameter must come from W.h5 (lm_head from the embedding when tied).

RoPE scaling: "linear" as transformers has always spelled it ({"type": "linear"}); "llama3"
needs transformers >= 4.43 -- with an older one the script prints why and exits 3 (the
caller skips the case). --save-pretrained also writes the model, in float32, with
save_pretrained (config.json + model.safetensors): what `flexsp import` reads.
--from-pretrained runs the model transformers loads from DIR (what `flexsp export` writes)
instead of W.h5's.

Output (compare.py reads it): /loss float64, /num_predictions int64, /logits float32
[T, vocab], /grad/<HF name> float32 -- the names and layout of llama_ref.py's output.
"""
import argparse
import os
import sys
from collections import OrderedDict

import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref as ref  # noqa: E402  (file I/O only: load_weights, load_batch, write_out)


def rope_scaling(cfg):
    """transformers' rope_scaling dict of the case's RoPE scaling (None: none)."""
    kind = cfg.get("rope_scaling", "none")
    if kind == "linear":
        return {"type": "linear", "factor": cfg["rope_scaling_factor"]}
    if kind == "llama3":
        import transformers
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
        if (major, minor) < (4, 43):
            print(f"transformers {transformers.__version__} has no llama3 RoPE scaling (4.43+)")
            sys.exit(3)
        return {"rope_type": "llama3", "factor": cfg["rope_scaling_factor"],
                "low_freq_factor": cfg["rope_low_freq_factor"],
                "high_freq_factor": cfg["rope_high_freq_factor"],
                "original_max_position_embeddings": int(cfg["rope_original_max_position"])}
    assert kind == "none", kind
    return None


def build(cfg, params, dtype):
    """A LlamaForCausalLM holding params (HF names), in dtype."""
    hf = LlamaForCausalLM(LlamaConfig(
        rope_scaling=rope_scaling(cfg),
        vocab_size=cfg["vocab"], hidden_size=cfg["hidden"], intermediate_size=cfg["ffn"],
        num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"],
        num_key_value_heads=cfg["kv_heads"], rope_theta=cfg["rope_theta"],
        rms_norm_eps=cfg["norm_eps"], tie_word_embeddings=bool(cfg["tie_embeddings"]),
        hidden_act="silu", attention_bias=False, attention_dropout=0.0,
        max_position_embeddings=4096)).to(dtype)
    state = {k: v.detach().to(dtype) for k, v in params.items()}
    if cfg["tie_embeddings"]:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    hf.load_state_dict(state, strict=True)
    if cfg["tie_embeddings"]:
        assert hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    return hf.eval()


def run(hf, names, tokens, cu):
    """Loss, logits and the gradients of `names` of model hf on the packed batch."""
    logits, total, n = [], 0.0, 0
    for i in range(len(cu) - 1):
        a, b = int(cu[i]), int(cu[i + 1])
        if b == a:
            continue
        ids = tokens[a:b][None]
        lg = hf(input_ids=ids, use_cache=False).logits[0]
        logits.append(lg)
        if b - a > 1:
            total = total + F.cross_entropy(lg[:-1], ids[0, 1:], reduction="sum")
            n += b - a - 1
    if n == 0:
        raise SystemExit("batch has no predictions (every sequence has length <= 1)")
    loss = total / n
    loss.backward()
    named = dict(hf.named_parameters())  # a tied lm_head appears once, as the embedding
    grad = OrderedDict((k, named[k].grad.detach()) for k in names)
    return {"loss": float(loss.item()), "num_predictions": n,
            "logits": torch.cat(logits).detach(), "grad": grad}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--weights")
    src.add_argument("--from-pretrained", metavar="DIR")
    ap.add_argument("--batch", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    ap.add_argument("--save-pretrained", metavar="DIR")
    a = ap.parse_args(argv)
    dtype = getattr(torch, a.dtype)
    tokens, cu = ref.load_batch(a.batch)
    if a.from_pretrained:
        hf = LlamaForCausalLM.from_pretrained(a.from_pretrained, torch_dtype=dtype).eval()
        names = [k for k, _ in hf.named_parameters()]
    else:
        cfg, params = ref.load_weights(a.weights, dtype)
        hf, names = build(cfg, params, dtype), list(params)
    res = run(hf, names, tokens, cu)
    ref.write_out(a.out, res)
    if a.save_pretrained and a.weights:
        _, p32 = ref.load_weights(a.weights, torch.float32)
        build(cfg, p32, torch.float32).save_pretrained(a.save_pretrained, safe_serialization=True)
    import transformers
    print(f"transformers {transformers.__version__}: loss {res['loss']:.10f} over "
          f"{res['num_predictions']} predictions ({len(cu) - 1} sequences, {a.dtype}) -> {a.out}")


if __name__ == "__main__":
    main()
