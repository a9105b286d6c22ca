#!/usr/bin/env python3
"""Reference outputs of the converted SmolLM2 checkpoint, from an independent numpy forward.

Reads DIR/config.json, DIR/model.safetensors and DIR/tokenizer.json (as written by
scripts/gguf_to_hf.py), encodes PROMPT with a small byte-level BPE written here (ASCII prompts
only; it shares no code with the `tokenizers` library), runs greedy decoding for STEPS tokens
with the float64 forward of scripts/llama_reference.py (`logits`: full causal recomputation,
Hugging Face Llama semantics) and writes DIR/reference.json:

    {"prompt", "ids" (prompt ids, no BOS: the GGUF's add_bos_token is false), "tokens" (the
     greedy ids), "text" (their decoding), "first_logits" (the first 8 logits of step 1),
     "margins" (each step's top-1/top-2 logit gap, to tell how far the tokens are from a tie),
     "min_margin", "bos_added": false}

It refuses (exit 1) a prompt whose greedy continuation is not plain text, a sign of a wrong
conversion. With --gguf FILE it also checks two tensors of model.safetensors against a
dequantization of FILE's raw blocks written here (Q4_1 q_proj of layer 0, undoing llama.cpp's
row permutation, and the Q8_0 embeddings), independently of gguf.quants.

Usage: smollm2_reference.py DIR [--prompt TEXT] [--steps N] [--gguf FILE]
Needs: numpy (and the `gguf` package's reader for --gguf).
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_reference import byte_level_alphabet, logits  # noqa: E402


def fail(msg):
    sys.exit(f"smollm2_reference: {msg}")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    dtypes = {"F16": "<f2", "F32": "<f4"}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        out[name] = data[a:b].view(dtypes[e["dtype"]]).reshape(e["shape"])
    return out


class Bpe:
    """Byte-level BPE over tokenizer.json's vocab and merges, for ASCII text: digits split one by
    one, then GPT-2's pre-tokenizer regex (letters/digits restricted to ASCII)."""

    PIECE = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")

    def __init__(self, tok):
        model = tok["model"]
        self.vocab = model["vocab"]
        self.inv = {i: t for t, i in self.vocab.items()}
        for a in tok["added_tokens"]:
            self.inv[a["id"]] = a["content"]
        merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
        self.rank = {tuple(m): i for i, m in enumerate(merges)}
        self.to_char = dict(enumerate(byte_level_alphabet()))
        self.to_byte = {c: b for b, c in self.to_char.items()}

    def word(self, piece):
        sym = [self.to_char[b] for b in piece.encode()]
        while len(sym) > 1:
            pairs = [(self.rank.get((sym[i], sym[i + 1]), 1 << 30), i) for i in range(len(sym) - 1)]
            r, i = min(pairs)
            if r == 1 << 30:
                break
            sym[i:i + 2] = [sym[i] + sym[i + 1]]
        return [self.vocab[s] for s in sym]

    def encode(self, text):
        if not text.isascii():
            fail("the reference tokenizer handles ASCII prompts only")
        ids = []
        for chunk in re.split(r"([0-9])", text):
            if not chunk:
                continue
            for piece in ([chunk] if chunk.isdigit() else self.PIECE.findall(chunk)):
                ids += self.word(piece)
        return ids

    def decode(self, ids):
        s = "".join(self.inv[i] for i in ids)
        return bytes(self.to_byte[c] for c in s).decode("utf-8", errors="replace")


def dequant_rows(data, qtype):
    """Raw GGUF blocks [rows, bytes] -> float32 [rows, cols]."""
    if qtype == "Q4_1":  # 32 weights: f16 scale d, f16 min m, 16 bytes of nibbles (low half first)
        blocks = data.reshape(data.shape[0], -1, 20)
        d = blocks[..., 0:2].copy().view("<f2").astype(np.float32)
        m = blocks[..., 2:4].copy().view("<f2").astype(np.float32)
        q = blocks[..., 4:20]
        nib = np.concatenate([q & 0x0F, q >> 4], axis=-1).astype(np.float32)
        return (d * nib + m).reshape(data.shape[0], -1)
    if qtype == "Q8_0":  # 32 weights: f16 scale d, 32 signed bytes
        blocks = data.reshape(data.shape[0], -1, 34)
        d = blocks[..., 0:2].copy().view("<f2").astype(np.float32)
        q = blocks[..., 2:34].copy().view(np.int8).astype(np.float32)
        return (d * q).reshape(data.shape[0], -1)
    fail(f"no hand dequantization for {qtype}")


def check_gguf(path, cfg, w):
    import gguf

    r = gguf.GGUFReader(path)
    t = {x.name: x for x in r.tensors}
    q = t["blk.0.attn_q.weight"]
    rows = dequant_rows(np.asarray(q.data), q.tensor_type.name)
    nh = cfg["num_attention_heads"]
    d = rows.shape[0] // nh
    # GGUF row h*d + 2i + j holds HF row h*d + j*d/2 + i.
    hf = rows.reshape(nh, d // 2, 2, -1).swapaxes(1, 2).reshape(rows.shape)
    e = t["token_embd.weight"]
    emb = dequant_rows(np.asarray(e.data), e.tensor_type.name)
    for name, want in (("model.layers.0.self_attn.q_proj.weight", hf), ("model.embed_tokens.weight", emb)):
        got = np.asarray(w[name], dtype=np.float32)
        if not np.array_equal(got, want.astype(np.float16).astype(np.float32)):
            fail(f"{name} differs from the hand dequantization of {path} "
                 f"(max |diff| {np.abs(got - want).max()})")
    print(f"smollm2_reference: q_proj.0 ({q.tensor_type.name}) and embeddings ({e.tensor_type.name}) "
          "match a hand dequantization of the GGUF", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--prompt", default="The capital of France is")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--gguf")
    a = ap.parse_args()
    cfg = json.load(open(os.path.join(a.dir, "config.json")))
    tok = json.load(open(os.path.join(a.dir, "tokenizer.json"), encoding="utf-8"))
    w = read_safetensors(os.path.join(a.dir, "model.safetensors"))
    if a.gguf:
        check_gguf(a.gguf, cfg, w)
    bpe = Bpe(tok)
    ids = bpe.encode(a.prompt)
    if bpe.decode(ids) != a.prompt:
        fail(f"the prompt does not round-trip: {bpe.decode(ids)!r}")
    w = {k: np.asarray(v, dtype=np.float64) for k, v in w.items()}
    seq, first, margins = list(ids), None, []
    print(f"smollm2_reference: prompt {a.prompt!r} = {ids}; {a.steps} greedy steps", file=sys.stderr)
    for _ in range(a.steps):
        row = logits(cfg, w, seq)[-1]
        if first is None:
            first = [float(v) for v in row[:8]]
        top = np.sort(row)[::-1]
        margins.append(float(top[0] - top[1]))
        seq.append(int(np.argmax(row)))
    tokens = seq[len(ids):]
    text = bpe.decode(tokens)
    print(f"smollm2_reference: {a.prompt}|{text}", file=sys.stderr)
    letters = sum(c.isascii() and (c.isalnum() or c in " .,'\n-") for c in text)
    if len(text) < 20 or letters < 0.9 * len(text):
        fail(f"the greedy continuation {text!r} does not look like text (a bad conversion?)")
    ref = {"prompt": a.prompt, "ids": ids, "bos_added": False, "steps": a.steps, "tokens": tokens,
           "text": text, "first_logits": first, "margins": margins, "min_margin": min(margins)}
    with open(os.path.join(a.dir, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ": "))
        f.write("\n")


if __name__ == "__main__":
    main()
