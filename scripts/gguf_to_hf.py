#!/usr/bin/env python3
"""Converts a Llama-architecture GGUF (llama.cpp) file to a Hugging Face-layout directory.

Writes into OUT_DIR:
  config.json        LlamaForCausalLM keys (sizes, rms_norm_eps, rope_theta, context length,
                     tie_word_embeddings, bos/eos ids), from the GGUF metadata.
  model.safetensors  HF tensor names, PyTorch [out, in] layout; matrices dequantized (from
                     Q4_1, Q8_0 or whatever the file holds) to F16, norms F32. The q_proj and
                     k_proj rows are put back in HF's rotate-half order (llama.cpp's HF->GGUF
                     converter interleaves them for its rotary pairing).
  tokenizer.json     GPT-2 style byte-level BPE for the `tokenizers` library, rebuilt from the
                     GGUF vocabulary, merges, token types and pre-tokenizer name.

Anything that is not plain Llama (rope scaling, experts, biases, another head width, a
pre-tokenizer it does not know) is refused with a message and exit status 1. The output is
deterministic: the same GGUF and library versions give byte-identical files.

Usage: gguf_to_hf.py MODEL.gguf OUT_DIR
Needs: numpy and the `gguf` package (its reader and gguf.quants.dequantize).
"""
import json
import os
import struct
import sys

import numpy as np

from llama_reference import byte_level_alphabet, tokenizer_json

try:
    import gguf
    from gguf import GGMLQuantizationType as Q
except ImportError:
    sys.exit("gguf_to_hf: the `gguf` Python package is missing (pip install gguf)")


def fail(msg):
    sys.exit(f"gguf_to_hf: {msg}")


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def f32_value(v):
    """A float stored as f32 in the GGUF, written as its shortest f32 decimal (1e-05, not
    9.999999747378752e-06)."""
    return float(str(np.float32(v)))


def read_config(r):
    arch = field(r, "general.architecture")
    if arch != "llama":
        fail(f"general.architecture is {arch!r}; only 'llama' is supported")
    p = "llama."
    for key in r.fields:
        if key.startswith(p + "rope.scaling.") and key != p + "rope.scaling.type" and \
                key != p + "rope.scaling.finetuned":
            fail(f"{key} = {field(r, key)!r}: rope scaling is not supported (plain rotary only)")
    scaling = field(r, p + "rope.scaling.type", "none")
    if scaling not in ("none", None):
        fail(f"rope scaling {scaling!r} is not supported (plain rotary only)")
    for key in ("expert_count", "expert_used_count"):
        if field(r, p + key, 0):
            fail(f"{p + key} = {field(r, p + key)}: mixture of experts is not supported")
    hidden = int(field(r, p + "embedding_length"))
    heads = int(field(r, p + "attention.head_count"))
    kv_heads = int(field(r, p + "attention.head_count_kv", heads))
    head_dim = hidden // heads
    if hidden % heads:
        fail(f"embedding_length {hidden} is not a multiple of head_count {heads}")
    for key in ("attention.key_length", "attention.value_length", "rope.dimension_count"):
        v = field(r, p + key)
        if v is not None and int(v) != head_dim:
            fail(f"{p + key} = {v} differs from the head width {head_dim} (not supported)")
    tokens = field(r, "tokenizer.ggml.tokens")
    vocab = int(field(r, p + "vocab_size", len(tokens)))
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(field(r, p + "feed_forward_length")),
        "num_hidden_layers": int(field(r, p + "block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "vocab_size": vocab,
        "rms_norm_eps": f32_value(field(r, p + "attention.layer_norm_rms_epsilon")),
        "rope_theta": f32_value(field(r, p + "rope.freq_base", 10000.0)),
        "max_position_embeddings": int(field(r, p + "context_length")),
        "hidden_act": "silu",
        "tie_word_embeddings": not any(t.name == "output.weight" for t in r.tensors),
        "bos_token_id": field(r, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(r, "tokenizer.ggml.eos_token_id"),
        "torch_dtype": "float16",
    }
    return cfg


def unpermute(w, n_head):
    """Inverse of llama.cpp's HF->GGUF q/k permutation
    w.reshape(n_head, 2, d // 2, *rest).swapaxes(1, 2).reshape(w.shape)."""
    d = w.shape[0] // n_head
    return w.reshape(n_head, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(name):
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    parts = name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[3] == "weight" and parts[2] in LAYER_NAMES:
        return f"model.layers.{int(parts[1])}.{LAYER_NAMES[parts[2]]}.weight"
    fail(f"tensor {name!r} has no Llama counterpart (not a plain Llama checkpoint)")


def layer_key(hf):
    """Sort order: embeddings, layers in number order (HF's order within a layer), norm, head."""
    order = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
             "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
             "mlp.down_proj"]
    if hf == "model.embed_tokens.weight":
        return (0, 0, 0)
    if hf.startswith("model.layers."):
        _, _, n, rest = hf.split(".", 3)
        return (1, int(n), order.index(rest[: -len(".weight")]))
    return (2, 0 if hf == "model.norm.weight" else 1, 0)


def convert_tensors(r, cfg):
    out = {}
    for t in r.tensors:
        name = hf_name(t.name)
        qtype = t.tensor_type
        if qtype in (Q.F32, Q.F16):
            w = np.asarray(t.data, dtype=np.float32)
        else:
            w = gguf.quants.dequantize(t.data, qtype)
        # The reader's numpy shape is GGUF's ne reversed: [rows, cols] = PyTorch's [out, in].
        shape = [int(x) for x in reversed(t.shape)]
        w = w.reshape(shape)
        if name.endswith("layernorm.weight") or name == "model.norm.weight":
            if len(shape) != 1:
                fail(f"norm {t.name} has shape {shape}")
            out[name] = w.astype("<f4")
            continue
        if name.endswith("q_proj.weight"):
            w = unpermute(w, cfg["num_attention_heads"])
        elif name.endswith("k_proj.weight"):
            w = unpermute(w, cfg["num_key_value_heads"])
        w16 = w.astype("<f2")
        if not np.isfinite(w16).all():
            fail(f"{t.name} ({qtype.name}) does not fit in f16")
        out[name] = w16
    h, kvd = cfg["hidden_size"], cfg["num_key_value_heads"] * (cfg["hidden_size"] // cfg["num_attention_heads"])
    inter, v = cfg["intermediate_size"], cfg["vocab_size"]
    want = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        want.update({p + "input_layernorm.weight": [h], p + "post_attention_layernorm.weight": [h],
                     p + "self_attn.q_proj.weight": [h, h], p + "self_attn.k_proj.weight": [kvd, h],
                     p + "self_attn.v_proj.weight": [kvd, h], p + "self_attn.o_proj.weight": [h, h],
                     p + "mlp.gate_proj.weight": [inter, h], p + "mlp.up_proj.weight": [inter, h],
                     p + "mlp.down_proj.weight": [h, inter]})
    if not cfg["tie_word_embeddings"]:
        want["lm_head.weight"] = [v, h]
    if set(want) != set(out):
        fail(f"tensors missing: {sorted(set(want) - set(out))[:5]}, "
             f"unexpected: {sorted(set(out) - set(want))[:5]}")
    for k, s in want.items():
        if list(out[k].shape) != s:
            fail(f"{k} has shape {list(out[k].shape)}, expected {s}")
    return {k: out[k] for k in sorted(out, key=layer_key)}


def write_safetensors(path, tensors):
    header, offset = {}, 0
    for name, a in tensors.items():
        dtype = {"<f2": "F16", "<f4": "F32"}[a.dtype.str]
        header[name] = {"dtype": dtype, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a).tobytes())


# llama.cpp's pre-tokenizer names -> the equivalent `tokenizers` pre-tokenizer.
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
PRE_TOKENIZERS = {
    # GPT-2's regex only.
    "gpt-2": BYTE_LEVEL,
    # SmolLM: every digit alone ("\p{N}" split first), then GPT-2's regex.
    "smollm": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True}, BYTE_LEVEL]},
}
# GGUF token types (llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def tokenizer(r):
    model = field(r, "tokenizer.ggml.model")
    if model != "gpt2":
        fail(f"tokenizer.ggml.model is {model!r}; only byte-level BPE ('gpt2') is supported")
    pre = field(r, "tokenizer.ggml.pre", "default")
    if pre not in PRE_TOKENIZERS:
        fail(f"tokenizer.ggml.pre {pre!r} is not supported (known: {', '.join(PRE_TOKENIZERS)})")
    if field(r, "tokenizer.ggml.add_space_prefix", False):
        fail("tokenizer.ggml.add_space_prefix true is not supported")
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type", [NORMAL] * len(tokens))
    merges = field(r, "tokenizer.ggml.merges")
    if len(set(tokens)) != len(tokens):
        fail("the vocabulary has duplicate tokens")
    # A byte-level BPE has a symbol for every byte it saw in training; SmolLM2 lacks a few
    # control bytes and the rare UTF-8 lead bytes F1/F2 (and C0, C1, F5..FF, never in UTF-8).
    # Such bytes are dropped when encoding, as llama.cpp does (no unk token). Require at least
    # tab, newline and printable ASCII, so another kind of vocabulary is refused.
    alphabet, vocab = byte_level_alphabet(), set(tokens)
    needed = [b for b in [9, 10, 13] + list(range(0x20, 0x7F)) if alphabet[b] not in vocab]
    if needed:
        fail(f"the vocabulary lacks byte-level symbols for bytes {needed[:8]} (not a GPT-2 style BPE)")
    absent = [f"{b:02x}" for b in range(256) if alphabet[b] not in vocab]
    if absent:
        print(f"gguf_to_hf: note: no token for bytes {' '.join(absent)}; they are dropped when "
              "encoding", file=sys.stderr)
    pairs = []
    for m in merges:
        a, sep, b = m.partition(" ")
        if not sep or " " in b:
            fail(f"merge {m!r} is not two symbols")
        pairs.append([a, b])
    added = []
    for i, (t, ty) in enumerate(zip(tokens, types)):
        if ty in (CONTROL, USER_DEFINED):
            added.append({"id": i, "content": t, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": ty == USER_DEFINED,
                          "special": ty == CONTROL})
        elif ty not in (NORMAL, UNUSED):
            fail(f"token {i} {t!r} has type {ty}, unexpected in a byte-level BPE")
    post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    if field(r, "tokenizer.ggml.add_bos_token", False):
        bos_id = field(r, "tokenizer.ggml.bos_token_id")
        bos_tok = tokens[bos_id]
        bos = {"SpecialToken": {"id": bos_tok, "type_id": 0}}
        seq = lambda x, ty: {"Sequence": {"id": x, "type_id": ty}}  # noqa: E731
        post = {"type": "TemplateProcessing",
                "single": [bos, seq("A", 0)],
                "pair": [bos, seq("A", 0), bos, seq("B", 1)],
                "special_tokens": {bos_tok: {"id": bos_tok, "ids": [bos_id], "tokens": [bos_tok]}}}
    if field(r, "tokenizer.ggml.add_eos_token", False):
        fail("tokenizer.ggml.add_eos_token true is not supported")
    decoder = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": False,
             "vocab": {t: i for i, t in enumerate(tokens)}, "merges": pairs}
    return tokenizer_json(added, PRE_TOKENIZERS[pre], post, decoder, model)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    if not os.path.isfile(src):
        fail(f"{src}: no such file")
    r = gguf.GGUFReader(src)
    cfg = read_config(r)
    tok = tokenizer(r)
    if len(tok["model"]["vocab"]) != cfg["vocab_size"]:
        fail(f"vocab_size {cfg['vocab_size']} differs from the {len(tok['model']['vocab'])} tokens")
    types = sorted({t.tensor_type.name for t in r.tensors})
    print(f"gguf_to_hf: {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
          f"vocab {cfg['vocab_size']}, tensor types {', '.join(types)}; dequantizing", file=sys.stderr)
    tensors = convert_tensors(r, cfg)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, separators=(",", ":"))
    write_safetensors(os.path.join(out, "model.safetensors"), tensors)
    print(f"gguf_to_hf: wrote config.json, tokenizer.json, model.safetensors "
          f"({sum(a.nbytes for a in tensors.values()) / 1e6:.0f} MB) to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
