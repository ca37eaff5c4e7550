#!/usr/bin/python3
"""Independent cross-check of blz's .wdelta writer and codecs with numpy.

Stands in for "loads in the reference implementation" (deltatensors cannot be installed
here). Written from the spec (docs/wdelta.md), not from blz's C++ or the reference's code:

  1. a small .wdelta reader: preamble, SHA-256 trailer, header, records by (tensor, field);
  2. the header bytes must equal Python's json.dumps(json.loads(header), separators=(",", ":"))
     (so blz writes exactly what Python would);
  3. each tensor is re-encoded with numpy the way the reference's compress_* functions do
     (float32 arithmetic, np.mean, np.float16 of Python floats, np.rint / np.round) and its
     meta keys, record dtypes and bytes must equal blz's (top-k ties cannot differ: the data
     is random; stable argsort is blz's lower-index-first rule anyway);
  4. np.mean(row) in float32 equals blz's NumpyMeanF32 bit for bit on rows of many lengths;
  5. each tensor is decoded with numpy as the reference's decompress_add_ does, onto the
     same base, and the float32 result must be bit-identical to blz's reconstruction.

Usage: wdelta_numpy_check.py --tool PATH/wdelta_fixture_tool   (exit 77 = skipped)
"""

import argparse
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed for this python3; the cross-check needs it")
    sys.exit(77)

F32 = np.float32


def read_wdelta(path):
    data = open(path, "rb").read()
    assert data[:7] == b"wdelta\x00", "magic"
    version, hlen = struct.unpack_from("<II", data, 7)
    assert version in (1, 2), version
    assert hashlib.sha256(data[:-32]).digest() == data[-32:], "SHA-256 trailer"
    hbytes = data[15:15 + hlen]
    header = json.loads(hbytes.decode("utf-8"))
    again = json.dumps(header, separators=(",", ":")).encode("utf-8")
    assert again == hbytes, "header is not what json.dumps writes:\n%r\n%r" % (hbytes[:300], again[:300])
    records = {}
    pos, end = 15 + hlen, len(data) - 32

    def string():
        nonlocal pos
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    while pos < end:
        tensor, field, dtype = string(), string(), string()
        (ndim,) = struct.unpack_from("<I", data, pos)
        pos += 4
        shape = struct.unpack_from("<%dQ" % ndim, data, pos)
        pos += 8 * ndim
        (nbytes,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        assert pos + nbytes <= end
        arr = np.frombuffer(data[pos:pos + nbytes], dtype=np.dtype(dtype).newbyteorder("<"))
        records[(tensor, field)] = arr.reshape(shape)
        pos += nbytes
    assert pos == end
    return version, header, records


def pack_nibbles(q):
    q = q.astype(np.uint8)
    if len(q) % 2:
        q = np.concatenate([q, np.zeros(1, np.uint8)])
    return ((q[0::2] << 4) | (q[1::2] & 0x0F)).astype(np.uint8)


def unpack_nibbles(packed, count):
    out = np.empty(len(packed) * 2, np.uint8)
    out[0::2] = packed >> 4
    out[1::2] = packed & 0x0F
    return out[:count]


def top_k(flat, k):
    order = np.argsort(-np.abs(flat), kind="stable")  # ties: lower index first
    return np.sort(order[:k])


# --- the reference's encoders, re-derived -----------------------------------------------------

def encode(strategy, flat, shape, version):
    n = flat.size
    if strategy == "sparse":
        k = max(1, int(n * (1.0 - 0.9)))
        idx = top_k(flat, k).astype(np.int64)
        meta = {"strategy": "sparse", "shape": list(shape), "dtype": "float32", "sparsity": 0.9}
        return meta, {"indices": idx, "values": flat[idx].astype(F32)}
    if strategy == "quantized":
        mat = flat.reshape(shape[0], -1) if len(shape) > 1 else flat.reshape(1, -1)
        scales = np.mean(np.abs(mat), axis=1).astype(np.float16)
        signs = np.sign(mat).astype(np.int8)
        signs[signs == 0] = 1
        packed = np.packbits((signs > 0).astype(np.uint8).flatten())
        meta = {"strategy": "quantized", "shape": list(shape), "dtype": "float32",
                "n_elements": int(mat.size), "n_cols": int(mat.shape[1])}
        return meta, {"scales": scales, "packed_signs": packed}
    # int4
    n_out = min(n, max(1, int(n * 0.01)))
    idx = top_k(flat, n_out)
    mask = np.ones(n, dtype=bool)
    mask[idx] = False
    rest = flat[mask]
    q_min, q_max = (float(rest.min()), float(rest.max())) if rest.size else (0.0, 0.0)
    zero_point = np.float16(q_min)
    if version == 2:
        scale = np.float16((q_max - q_min) / 15.0)
        if q_max - q_min < 1e-8 or float(scale) == 0.0:
            scale = np.float16(1.0)
            q = np.zeros(n, np.uint8)
        else:
            q = np.clip(np.rint((flat - float(zero_point)) / float(scale)), 0, 15).astype(np.uint8)
        idx = idx.astype(np.int32 if n < 2**31 else np.int64)
    else:
        q_range = q_max - q_min
        if q_range < 1e-8:
            scale = np.float16(1.0)
            q = np.zeros(rest.size, np.uint8)
        else:
            scale = np.float16(q_range / 15.0)
            q = np.clip(np.round((rest - q_min) / q_range * 15.0), 0, 15).astype(np.uint8)
        idx = idx.astype(np.int64)
    meta = {"strategy": "int4", "shape": list(shape), "dtype": "float32", "outlier_fraction": 0.01,
            "n_elements": n, "n_outliers": n_out}
    if version == 2:
        meta["int4_layout"] = 2
    return meta, {"outlier_idx": idx, "outlier_vals": flat[idx].astype(np.float16),
                  "scale": np.array([scale], np.float16),
                  "zero_point": np.array([zero_point], np.float16), "packed": pack_nibbles(q)}


# --- the reference's decompress_add_, re-derived ----------------------------------------------

def decode_add(meta, rec, base):
    out = base.copy()
    n = out.size
    s = meta["strategy"]
    if s == "sparse":
        out[rec["indices"]] += rec["values"].astype(F32)
        return out
    if s == "quantized":
        cols = meta["n_cols"]
        rows = meta["n_elements"] // cols
        bits = np.unpackbits(rec["packed_signs"])[:n].reshape(rows, cols)
        sc = rec["scales"].astype(F32)[:, np.newaxis]
        mat = out.reshape(rows, cols)
        mat += np.where(bits.astype(bool), sc, -sc)
        return out
    idx = rec["outlier_idx"].reshape(-1)
    vals = rec["outlier_vals"].reshape(-1).astype(F32)
    lut = np.arange(16, dtype=F32) / 15.0 * (float(rec["scale"][0]) * 15.0) + float(rec["zero_point"][0])
    if meta.get("int4_layout", 1) >= 2:
        saved = out[idx]
        out += lut[unpack_nibbles(rec["packed"], n)]
        out[idx] = saved + vals
        return out
    mask = np.ones(n, dtype=bool)
    mask[idx] = False
    add = np.zeros(n, F32)
    add[mask] = lut[unpack_nibbles(rec["packed"], n - idx.size)]
    out += add
    out[idx] += vals
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    args = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory(prefix="wdelta-numpy-") as tmp:
        subprocess.run([args.tool, tmp], check=True)
        manifest = json.load(open(os.path.join(tmp, "manifest.json")))
        files = {}
        for entry in manifest:
            f = entry["file"]
            if f not in files:
                files[f] = read_wdelta(os.path.join(tmp, f))
            version, header, records = files[f]
            name, shape = entry["name"], entry["shape"]
            meta = header["tensors"][name]
            load = lambda kind: np.fromfile(os.path.join(tmp, "%s.%s.f32" % (name, kind)), dtype="<f4")
            base, delta, recon = load("base"), load("delta"), load("recon")
            rec = {field: records[(name, ref["_ref"])] for field, ref in meta.items()
                   if isinstance(ref, dict) and "_ref" in ref}

            want_meta, want_fields = encode(entry["strategy"], delta, shape, version)
            got_keys = [k for k in meta if not (isinstance(meta[k], dict) and "_ref" in meta[k])]
            if got_keys != list(want_meta) or any(meta[k] != v for k, v in want_meta.items()):
                failures.append("%s: meta %r, expected %r" % (name, meta, want_meta))
            ref_keys = [k for k in meta if k not in want_meta]
            if ref_keys != list(want_fields):
                failures.append("%s: fields %r, expected %r" % (name, ref_keys, list(want_fields)))
            for field, want in want_fields.items():
                got = rec.get(field)
                if got is None or got.dtype != want.dtype or got.shape != want.shape or \
                        got.tobytes() != want.tobytes():
                    failures.append("%s: field %s differs: blz %r / numpy %r" % (
                        name, field, None if got is None else (got.dtype, got.shape, got.reshape(-1)[:8]),
                        (want.dtype, want.shape, want.reshape(-1)[:8])))

            mine = decode_add(meta, rec, base)
            if mine.view(np.uint32).tobytes() != recon.view(np.uint32).tobytes():
                bad = np.nonzero(mine.view(np.uint32) != recon.view(np.uint32))[0]
                failures.append("%s: %d reconstructed values differ, first at %d: numpy %r blz %r" % (
                    name, bad.size, bad[0], mine[bad[0]], recon[bad[0]]))
        lengths = json.load(open(os.path.join(tmp, "means.json")))
        rows = np.fromfile(os.path.join(tmp, "means.rows.f32"), dtype="<f4")
        blz_means = np.fromfile(os.path.join(tmp, "means.blz.f32"), dtype="<f4")
        at = 0
        for i, n in enumerate(lengths):
            want = np.mean(rows[at:at + n].reshape(1, n), axis=1)[0]
            at += n
            if want.view(np.uint32) != blz_means[i].view(np.uint32):
                failures.append("np.mean of a row of %d: numpy %r blz %r" % (n, want, blz_means[i]))
        print("checked %d tensors in %d files (numpy %s)" % (len(manifest), len(files), np.__version__))
    for f in failures:
        print("MISMATCH", f)
    if failures:
        return 1
    print("OK: headers are json.dumps-identical, fields equal numpy's encoders, reconstructions bit-identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
