#!/usr/bin/env python3
"""A small Llama checkpoint with deterministic random weights, and its reference outputs.

Writes DIR/config.json, DIR/model.safetensors, DIR/tokenizer.json and DIR/reference.json. The
reference is an independent numpy (float64) implementation of the architecture, written from its
definition (Hugging Face's LlamaForCausalLM semantics: RMSNorm, rotate-half rotary embeddings,
grouped-query attention, SwiGLU MLP); it shares no code with tensormem. For each prompt it records
the prompt ids (whitespace words, BOS first), 64 greedy tokens, the logits of every step (with
exact keys and values, and with them rounded to f16 as an f16 KV cache holds them) and the
smallest top-1/top-2 logit margin met (the test checks the margin is far above rounding, so equal
tokens mean something).

Usage: llama_reference.py DIR [--tied]    (needs numpy only)
"""
import json
import struct
import sys

import numpy as np

WORDS = (
    "the a an cat dog bird fish tree house car road river sky sun moon star rain snow wind "
    "red blue green black white small big old new fast slow happy sad warm cold "
    "runs sits sees eats sleeps jumps flies swims sings reads walks looks finds "
    "on in under over near with from to and but or because when then so "
    "one two three four five six seven eight nine ten many few all some every "
    "morning night day week year today now later here there always never often "
    "memory runtime tensor block cache page token model"
).split()
SPECIAL = ["<s>", "</s>", "<unk>"]
VOCAB = SPECIAL + WORDS
PROMPTS = [
    "the cat sits on the old road",
    "memory runtime",
    "one two three four five six seven eight nine ten many few all some every morning night day "
    "week year today now later here there always",
]
STEPS = 64


def config(tied):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 160,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": len(VOCAB),
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 512,
        "hidden_act": "silu",
        "tie_word_embeddings": tied,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "float32",
    }


def weights(cfg, rng):
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def mat(out, inp, gain=1.0):
        return (rng.standard_normal((out, inp)) * gain / np.sqrt(inp)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": rng.standard_normal((v, h)).astype(np.float32)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        w[f"{p}.input_layernorm.weight"] = norm(h)
        w[f"{p}.self_attn.q_proj.weight"] = mat(q, h, 2.0)
        w[f"{p}.self_attn.k_proj.weight"] = mat(kv, h, 2.0)
        w[f"{p}.self_attn.v_proj.weight"] = mat(kv, h)
        w[f"{p}.self_attn.o_proj.weight"] = mat(h, q)
        w[f"{p}.post_attention_layernorm.weight"] = norm(h)
        w[f"{p}.mlp.gate_proj.weight"] = mat(inter, h)
        w[f"{p}.mlp.up_proj.weight"] = mat(inter, h)
        w[f"{p}.mlp.down_proj.weight"] = mat(h, inter)
    w["model.norm.weight"] = norm(h)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = mat(v, h, 4.0)
    return w


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def tokenizer():
    added = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}
        for i, t in enumerate(SPECIAL)
    ]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    post = {
        "type": "TemplateProcessing",
        "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}},
    }
    model = {"type": "WordLevel", "vocab": {t: i for i, t in enumerate(VOCAB)}, "unk_token": "<unk>"}
    return tokenizer_json(added, {"type": "WhitespaceSplit"}, post, None, model)


def tokenizer_json(added, pre_tokenizer, post_processor, decoder, model):
    """A tokenizer.json (Hugging Face tokenizers' format) without truncation, padding or
    normalizer. The keys keep the order the pinned hashes of the written files depend on."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": post_processor,
        "decoder": decoder,
        "model": model,
    }


def byte_level_alphabet():
    """GPT-2's byte -> printable character map (the ByteLevel pre-tokenizer's), indexed by byte."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = list(bs), 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rotary(x, theta):
    """x: [tokens, heads, d] at positions 0..tokens-1, rotate-half form."""
    t, _, d = x.shape
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    ang = np.arange(t, dtype=np.float64)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    rot = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], axis=-1)
    return x * np.cos(ang)[:, None, :] + rot * np.sin(ang)[:, None, :]


def logits(cfg, w, ids, kv_dtype=np.float64):
    """Logits of every position of `ids` (float64, full causal recomputation); keys and values
    rounded to `kv_dtype` as a KV cache storing them so would hold them."""
    g = {k: v.astype(np.float64) for k, v in w.items()}
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    h = cfg["hidden_size"]
    d = h // nh
    eps, theta = cfg["rms_norm_eps"], cfg["rope_theta"]
    x = g["model.embed_tokens.weight"][ids]
    t = len(ids)
    mask = np.triu(np.full((t, t), -np.inf), 1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        a = rms_norm(x, g[f"{p}.input_layernorm.weight"], eps)
        q = rotary((a @ g[f"{p}.self_attn.q_proj.weight"].T).reshape(t, nh, d), theta)
        k = rotary((a @ g[f"{p}.self_attn.k_proj.weight"].T).reshape(t, nkv, d), theta)
        v = (a @ g[f"{p}.self_attn.v_proj.weight"].T).reshape(t, nkv, d)
        k, v = k.astype(kv_dtype).astype(np.float64), v.astype(kv_dtype).astype(np.float64)
        out = np.zeros((t, nh, d))
        for head in range(nh):
            kh = head // (nh // nkv)
            s = q[:, head, :] @ k[:, kh, :].T / np.sqrt(d) + mask
            s = np.exp(s - s.max(-1, keepdims=True))
            out[:, head, :] = (s / s.sum(-1, keepdims=True)) @ v[:, kh, :]
        x = x + out.reshape(t, nh * d) @ g[f"{p}.self_attn.o_proj.weight"].T
        a = rms_norm(x, g[f"{p}.post_attention_layernorm.weight"], eps)
        gate = a @ g[f"{p}.mlp.gate_proj.weight"].T
        up = a @ g[f"{p}.mlp.up_proj.weight"].T
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ g[f"{p}.mlp.down_proj.weight"].T
    x = rms_norm(x, g["model.norm.weight"], eps)
    head = g["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else g["lm_head.weight"]
    return x @ head.T


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    out, tied = sys.argv[1], "--tied" in sys.argv[2:]
    cfg = config(tied)
    w = weights(cfg, np.random.default_rng(20261203 + tied))
    json.dump(cfg, open(f"{out}/config.json", "w"), indent=1)
    write_safetensors(f"{out}/model.safetensors", w)
    json.dump(tokenizer(), open(f"{out}/tokenizer.json", "w"))
    index = {t: i for i, t in enumerate(VOCAB)}
    cases = []
    for prompt in PROMPTS:
        ids = [0] + [index.get(word, 2) for word in prompt.split()]
        seq, steps, steps16, margin = list(ids), [], [], float("inf")
        for _ in range(STEPS):
            row = logits(cfg, w, seq)[-1]
            top = np.sort(row)[::-1]
            margin = min(margin, float(top[0] - top[1]))
            steps.append([float(v) for v in row])
            steps16.append([float(v) for v in logits(cfg, w, seq, np.float16)[-1]])
            seq.append(int(np.argmax(row)))
        cases.append({"prompt": prompt, "ids": ids, "tokens": seq[len(ids):], "logits": steps, "logits_f16_kv": steps16,
                      "min_margin": margin})
    json.dump({"steps": STEPS, "cases": cases}, open(f"{out}/reference.json", "w"))


if __name__ == "__main__":
    main()
