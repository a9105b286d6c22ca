#!/usr/bin/env python3
"""Helpers of scripts/gpu-check.sh. Standard library only: it runs on the GPU machine's python3.

  executables CARGO_JSON...        print "kind name path" for every executable cargo built
  minilm-pack SRC OUT PACKED IDS   round MiniLM to bf16, keep the embedding rows of the token ids
                                   in the JSON file IDS (minilm --json output), write the rounded
                                   model to OUT/model.safetensors and its packed form to PACKED
  minilm-unpack PACKED OUT         rebuild OUT/model.safetensors from PACKED
  compare KIND REF GOT             compare a sample's --json output with the host reference
                                   (KIND mnist, minilm, or generate: identical tokens)
  rate JSON                        the decode rate of a timed generate run (its --json report)
  llama-synthetic OUT              write a small Llama checkpoint with seeded random f16 weights
                                   (config.json, model.safetensors, tokenizer.json) to OUT
  sha256 FILE                      print the file's sha256
  xz SRC DST / unxz SRC DST        compress / decompress one file (no xz program needed)
  nvrtc-dirs                       print the lib folders of pip-installed NVRTC wheels
                                   (nvidia/cu13/lib for CUDA 13, nvidia/cuda_nvrtc/lib for 12)
  fdwatch CMD...                   run CMD, sampling its open file descriptors and threads;
                                   print the peak, the descriptor limit, and what the descriptors
                                   pointed at when they peaked (a leak per backend shows there)

Why the MiniLM packing: the model is 91 MB of f32 and the whole bundle must stay under 40 MiB.
The bundle carries all six layers with every weight truncated to bf16 (the low 16 bits zeroed)
and the word-embedding rows of the check's sentences (the other rows zeroed): the packed file
stores only the high 16 bits of each f32, xz-compressed. The host reference is computed here
from exactly the rounded model that `minilm-unpack` rebuilds there, so CUDA is compared with the
host on the same weights.
"""

import glob
import hashlib
import json
import lzma
import math
import os
import site
import struct
import sys

MAGIC = b"TMPACK1\n"
EMBEDDINGS = "embeddings.word_embeddings.weight"
# [PAD], [UNK], [CLS], [SEP], [MASK] and the reserved/punctuation ids below 1000.
KEEP_BELOW = 1000


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    return raw[: 8 + n], header, bytearray(raw[8 + n :])


def tensors(header):
    items = [(k, v) for k, v in header.items() if k != "__metadata__"]
    items.sort(key=lambda kv: kv[1]["data_offsets"][0])
    return items


def executables(paths):
    for path in paths:
        with open(path) as f:
            for line in f:
                msg = json.loads(line)
                exe = msg.get("executable")
                if msg.get("reason") != "compiler-artifact" or not exe:
                    continue
                # A lib target has an executable only as its unit-test harness.
                target = msg["target"]
                print(target["kind"][0], target["name"], exe)


def minilm_pack(src, out_dir, packed, ids_json):
    with open(ids_json) as f:
        keep = {i for s in json.load(f)["sentences"] for i in s["token_ids"]}
    keep |= set(range(KEEP_BELOW))
    head, header, data = read_safetensors(os.path.join(src, "model.safetensors"))
    hi = bytearray()
    for name, t in tensors(header):
        start, end = t["data_offsets"]
        if name == EMBEDDINGS:
            rows, width = t["shape"]
            row = 4 * width
            for r in range(rows):
                if r not in keep:
                    data[start + r * row : start + (r + 1) * row] = bytes(row)
        if t["dtype"] == "F32":
            n = (end - start) // 4
            seg = data[start:end]
            seg[0::4] = bytes(n)
            seg[1::4] = bytes(n)
            data[start:end] = seg
            hi += _interleave_hi(seg)
        else:
            hi += data[start:end]
    os.makedirs(out_dir, exist_ok=True)
    rounded = os.path.join(out_dir, "model.safetensors")
    with open(rounded, "wb") as f:
        f.write(head)
        f.write(data)
    with open(packed, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        f.write(lzma.compress(bytes(hi), preset=6))
    print(sha256(rounded))


def _interleave_hi(seg):
    """The high 16 bits of every little-endian f32 in seg, in order."""
    out = bytearray(len(seg) // 2)
    out[0::2] = seg[2::4]
    out[1::2] = seg[3::4]
    return out


def minilm_unpack(packed, out_dir):
    with open(packed, "rb") as f:
        raw = f.read()
    if not raw.startswith(MAGIC):
        sys.exit(f"{packed}: not a packed MiniLM file")
    pos = len(MAGIC)
    (n,) = struct.unpack("<Q", raw[pos : pos + 8])
    head = raw[pos + 8 : pos + 8 + n]
    hi = lzma.decompress(raw[pos + 8 + n :])
    (hn,) = struct.unpack("<Q", head[:8])
    header = json.loads(head[8 : 8 + hn])
    items = tensors(header)
    data = bytearray(items[-1][1]["data_offsets"][1] if items else 0)
    cur = 0
    for _, t in items:
        start, end = t["data_offsets"]
        if t["dtype"] == "F32":
            take = (end - start) // 2
            part = hi[cur : cur + take]
            seg = bytearray(end - start)
            seg[2::4] = part[0::2]
            seg[3::4] = part[1::2]
            data[start:end] = seg
        else:
            take = end - start
            data[start:end] = hi[cur : cur + take]
        cur += take
    os.makedirs(out_dir, exist_ok=True)
    out = os.path.join(out_dir, "model.safetensors")
    with open(out, "wb") as f:
        f.write(head)
        f.write(data)
    print(sha256(out))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def close(a, b, atol, rtol):
    return math.isfinite(b) and abs(a - b) <= atol + rtol * abs(a)


def paired(ref, got, key, noun, bad):
    """The items under KEY of REF and GOT side by side; a count that differs adds a line to BAD."""
    if len(ref[key]) != len(got[key]):
        bad.append(f"{noun} count differs")
    return list(zip(ref[key], got[key]))


def compare_values(what, want, got, atol, rtol, bad):
    """The largest absolute difference of GOT from WANT; each value out of tolerance adds to BAD."""
    worst = 0.0
    for a, b in zip(want, got):
        worst = max(worst, abs(a - b))
        if not close(a, b, atol, rtol):
            bad.append(f"{what} {b} vs {a}")
    return worst


def compare(kind, ref_path, got_path):
    """Exit 0 when GOT matches REF within the tolerance of the conformance suite's op rule."""
    with open(ref_path) as f:
        ref = json.load(f)
    with open(got_path) as f:
        got = json.load(f)
    worst, bad = 0.0, []
    if kind == "mnist":
        for r, g in paired(ref, got, "images", "image", bad):
            if r["prediction"] != g["prediction"]:
                bad.append(f"{r['image']}: prediction {g['prediction']} != {r['prediction']}")
            worst = max(worst, compare_values(f"{r['image']}: logit", r["logits"], g["logits"],
                                              1e-3, 1e-3, bad))
    elif kind == "minilm":
        for r, g in paired(ref, got, "sentences", "sentence", bad):
            if r["token_ids"] != g["token_ids"]:
                bad.append(f"{r['sentence']!r}: token ids differ")
            worst = max(worst, compare_values(f"{r['sentence']!r}: embedding value",
                                              r["embedding"], g["embedding"], 1e-3, 1e-2, bad))
        for rr, gr in zip(ref["cosine"], got["cosine"]):
            for a, b in zip(rr, gr):
                if not close(a, b, 1e-3, 0.0):
                    bad.append(f"cosine {b} vs {a}")
    elif kind == "generate":
        for r, g in paired(ref, got, "outputs", "prompt", bad):
            if r["tokens"] != g["tokens"]:
                at = next((i for i, (a, b) in enumerate(zip(r["tokens"], g["tokens"])) if a != b),
                          min(len(r["tokens"]), len(g["tokens"])))
                bad.append(f"{r['prompt']!r}: tokens differ from position {at}")
        t = got["timings"]
        print(f"generate: prefill {t['prefill_tokens_per_s']:.1f} tokens/s, decode "
              f"{t['decode_tokens_per_s']:.1f} tokens/s, KV reads "
              f"{t['kv_read_bytes_per_s'] / 1e9:.4g} GB/s (H200 HBM3e peak: 4800 GB/s)")
    else:
        sys.exit(f"compare: unknown kind {kind}")
    print(f"compare {kind}: max abs difference {worst:.3g} against the host reference")
    for line in bad[:10]:
        print(f"  MISMATCH {line}")
    sys.exit(1 if bad else 0)


LLAMA = {"hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 4,
         "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1024}


def llama_synthetic(out):
    """A Llama checkpoint of seeded random f16 weights; tokens are the words w0..w1020."""
    os.makedirs(out, exist_ok=True)
    c = dict(LLAMA, architectures=["LlamaForCausalLM"], model_type="llama", rms_norm_eps=1e-5,
             rope_theta=10000.0, max_position_embeddings=2048, hidden_act="silu",
             tie_word_embeddings=False, bos_token_id=0, eos_token_id=1)
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    d = h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    rng = __import__("random").Random(20261203)
    tensors = {"model.embed_tokens.weight": ([v, h], 1.0)}
    for n in range(c["num_hidden_layers"]):
        p = f"model.layers.{n}"
        for name, shape, gain in [("self_attn.q_proj", [q, h], 2.0), ("self_attn.k_proj", [kv, h], 2.0),
                                  ("self_attn.v_proj", [kv, h], 1.0), ("self_attn.o_proj", [h, q], 1.0),
                                  ("mlp.gate_proj", [i, h], 1.0), ("mlp.up_proj", [i, h], 1.0),
                                  ("mlp.down_proj", [h, i], 1.0)]:
            tensors[f"{p}.{name}.weight"] = (shape, gain / math.sqrt(shape[1]))
        tensors[f"{p}.input_layernorm.weight"] = ([h], None)
        tensors[f"{p}.post_attention_layernorm.weight"] = ([h], None)
    tensors["model.norm.weight"] = ([h], None)
    # A strong untied head keeps greedy decoding off a single repeated token.
    tensors["lm_head.weight"] = ([v, h], 4.0 / math.sqrt(h))
    header, blobs, offset = {}, [], 0
    for name, (shape, scale) in tensors.items():
        n = math.prod(shape)
        vals = [1.0] * n if scale is None else [rng.gauss(0.0, scale) for _ in range(n)]
        b = struct.pack(f"<{n}e", *vals)
        header[name] = {"dtype": "F16", "shape": shape, "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=1)
    special = ["<s>", "</s>", "<unk>"]
    vocab = {t: k for k, t in enumerate(special + [f"w{k}" for k in range(v - 3)])}
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": k, "content": t, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}
                            for k, t in enumerate(special)],
           "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"},
           "post_processor": {"type": "TemplateProcessing",
                              "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                                       {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
           "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f)


def nvrtc_dirs():
    """Found by file, not by import: the CUDA 13 wheel has no nvidia.cuda_nvrtc module."""
    roots = set(sys.path) | set(site.getsitepackages() + [site.getusersitepackages()])
    seen = []
    for r in sorted(p for p in roots if p and os.path.isdir(p)):
        for f in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib", "libnvrtc.so*"))):
            d = os.path.dirname(f)
            if d not in seen:
                seen.append(d)
                print(d)


def _copy(src, dst):
    with src, dst:
        for chunk in iter(lambda: src.read(1 << 20), b""):
            dst.write(chunk)


def fdwatch(*cmd):
    import resource
    import subprocess
    import time

    proc = subprocess.Popen(cmd)
    fd_dir = f"/proc/{proc.pid}/fd"
    peak, peak_targets, peak_threads = 0, {}, 0
    while proc.poll() is None:
        try:
            fds = os.listdir(fd_dir)
            threads = len(os.listdir(f"/proc/{proc.pid}/task"))
        except OSError:
            break
        peak_threads = max(peak_threads, threads)
        if len(fds) > peak:
            targets = {}
            for fd in fds:
                try:
                    t = os.readlink(f"{fd_dir}/{fd}")
                except OSError:
                    continue
                # Numbered pseudo-files (pipe:[123], anon_inode:[eventfd]) by kind.
                t = t.split(":[")[0] if ":[" in t else t
                targets[t] = targets.get(t, 0) + 1
            peak, peak_targets = len(fds), targets
        time.sleep(0.1)
    rc = proc.wait()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    print(f"fdwatch: peak {peak} open descriptors (limit {soft} soft, {hard} hard), "
          f"peak {peak_threads} threads; at the peak:")
    for t, n in sorted(peak_targets.items(), key=lambda kv: -kv[1])[:15]:
        print(f"    {n:5d}  {t}")
    sys.exit(rc)


def rate(path):
    """Prints the decode rate of a timed generate run (its JSON report)."""
    t = json.load(open(path))["timings"]
    print(f"generate rate over {t['steps']} steps: decode {t['decode_tokens_per_s']:.1f} tokens/s "
          f"({t['decode_secs'] * 1e3 / max(t['steps'], 1):.2f} ms a step, batch {t['max_batch']})")


def main(argv):
    cmds = {
        "executables": (lambda *p: executables(p), None),
        "minilm-pack": (minilm_pack, 4),
        "minilm-unpack": (minilm_unpack, 2),
        "compare": (compare, 3),
        "rate": (rate, 1),
        "llama-synthetic": (llama_synthetic, 1),
        "sha256": (lambda p: print(sha256(p)), 1),
        "nvrtc-dirs": (nvrtc_dirs, 0),
        "fdwatch": (fdwatch, None),
        "xz": (lambda a, b: _copy(open(a, "rb"), lzma.open(b, "wb", preset=6)), 2),
        "unxz": (lambda a, b: _copy(lzma.open(a, "rb"), open(b, "wb")), 2),
    }
    if len(argv) < 2 or argv[1] not in cmds:
        sys.exit(__doc__)
    fn, nargs = cmds[argv[1]]
    if nargs is not None and len(argv) - 2 != nargs:
        sys.exit(__doc__)
    fn(*argv[2:])


if __name__ == "__main__":
    main(sys.argv)
