"""A generated BF16 model and small training-like steps of it, for the storage benchmarks.

    /usr/bin/python3 bench/bf16_series.py OUT STEPS [TENSORS ROWS COLS]

writes OUT/step-00 .. step-(STEPS-1), each a model.safetensors + config.json: TENSORS (8)
tensors "model.layers.{i // 2}.{attn|mlp}.weight" of ROWS x COLS (256 x 1024) BF16, cast from F32
master weights N(0, 0.02) (seed 27) that each step updates by N(0, 2e-5) per value, rounded to
nearest even as blz's own cast does. Used by bench/storage_bench.sh and bench/chain_bench.sh.
"""
import json
import os
import struct
import sys

import numpy as np


def bf16(x):
    u = x.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main(out, steps, tensors=8, rows=256, cols=1024):
    rng = np.random.default_rng(27)
    names = [f"model.layers.{i // 2}.{'attn' if i % 2 == 0 else 'mlp'}.weight"
             for i in range(tensors)]
    master = [rng.normal(0, 0.02, size=(rows, cols)).astype(np.float32) for _ in names]
    for step in range(steps):
        if step > 0:
            for m in master:
                m += rng.normal(0, 2e-5, size=m.shape).astype(np.float32)
        d = os.path.join(out, f"step-{step:02d}")
        os.makedirs(d, exist_ok=True)
        header, off, blobs = {}, 0, []
        for name, m in zip(names, master):
            b = bf16(m).astype("<u2").tobytes()
            header[name] = {"dtype": "BF16", "shape": list(m.shape),
                            "data_offsets": [off, off + len(b)]}
            off += len(b)
            blobs.append(b)
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * ((8 - len(raw) % 8) % 8)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "llama", "step": step}, f)


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:]))
