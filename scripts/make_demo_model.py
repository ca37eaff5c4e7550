#!/usr/bin/env python3
"""Writes a small synthetic Hugging Face model directory pair for the demo, for machines
without ../shared/corpus: a GPT-2-shaped F32 base (config.json + model.safetensors) and a
"fine-tune" of it in which every weight moved by a small relative amount and one tensor is new.

usage: make_demo_model.py OUT_DIR   -> OUT_DIR/base, OUT_DIR/ft
Deterministic (fixed seeds), pure Python (no numpy needed).
"""
import array
import json
import os
import random
import struct
import sys


def tensors_for(seed, fine_tune):
    rng = random.Random(seed)
    shapes = {
        "wte.weight": [2048, 64],
        "wpe.weight": [256, 64],
        "ln_f.weight": [64],
        "ln_f.bias": [64],
    }
    for layer in range(4):
        p = f"h.{layer}."
        shapes[p + "attn.c_attn.weight"] = [64, 192]
        shapes[p + "attn.c_proj.weight"] = [64, 64]
        shapes[p + "mlp.c_fc.weight"] = [64, 256]
        shapes[p + "mlp.c_proj.weight"] = [256, 64]
        shapes[p + "ln_1.weight"] = [64]
    out = {}
    tune = random.Random(seed + 1)
    for name, shape in shapes.items():
        n = 1
        for d in shape:
            n *= d
        scale = 0.02 if len(shape) > 1 else 1.0
        values = array.array("f", (rng.gauss(0.0, scale) for _ in range(n)))
        if fine_tune and not name.startswith("ln_f"):
            for i in range(n):
                values[i] = values[i] * (1.0 + tune.gauss(0.0, 0.01))
        out[name] = (shape, values)
    if fine_tune:
        out["score.weight"] = ([2, 64], array.array("f", (tune.gauss(0, 0.02) for _ in range(128))))
    return out


def write_safetensors(path, tensors):
    header = {}
    offset = 0
    blobs = []
    for name in sorted(tensors):
        shape, values = tensors[name]
        data = values.tobytes()
        if sys.byteorder != "little":
            raise SystemExit("big-endian host not supported")
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((8 - len(raw) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for b in blobs:
            f.write(b)


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = sys.argv[1]
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64,
              "n_layer": 4, "n_head": 4, "vocab_size": 2048, "torch_dtype": "float32"}
    for name, fine_tune in (("base", False), ("ft", True)):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        cfg = dict(config)
        if fine_tune:
            cfg["finetuned_from"] = "demo/base"
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2, sort_keys=True)
            f.write("\n")
        write_safetensors(os.path.join(d, "model.safetensors"), tensors_for(1234, fine_tune))


if __name__ == "__main__":
    main()
