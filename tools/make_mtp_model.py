#!/usr/bin/env python3
"""Makes a test checkpoint with a multi-token-prediction (MTP) draft head from a golden one.

    python3 tools/make_mtp_model.py SRC DST [--seed N]

SRC is a golden Qwen3-Next / Qwen3.5 / Qwen3.5-MoE folder (config.json, model.safetensors in
f32; tests/data/golden/qwen3_next, ...). DST gets:
  - config.json: SRC's plus "mtp_num_hidden_layers": 1, in text_config when the config wraps
    the decoder in one (Qwen3.5's multimodal layout), else at the top level;
  - generation_config.json: copied when SRC has one;
  - model.safetensors: SRC's tensors unchanged, plus seeded random mtp.* tensors:
      mtp.fc.weight [H, 2H], mtp.pre_fc_norm_embedding.weight [H], mtp.pre_fc_norm_hidden.weight
      [H], mtp.norm.weight [H], and mtp.layers.0.* named and shaped as the first full-attention
      layer's model.layers.{i}.* (attention and MLP of the model's kind).
Values: gauss(0, std) with each mirrored tensor's std measured on its model.layers.{i} twin (so
the head is scaled like the golden model), the norms' std measured on model.norm.weight (zero-
centred, the (1 + w) form), and fc std 1/sqrt(2H) (its output keeps the unit scale of its normed
inputs). Python standard library only; the same seed gives the same bytes.
"""

import argparse
import json
import math
import random
import shutil
import struct
import sys
from pathlib import Path


def read_safetensors(path):
    """-> (ordered list of (name, dtype, shape, bytes), metadata dict)."""
    blob = path.read_bytes()
    if len(blob) < 8:
        sys.exit(f"{path}: shorter than a safetensors header")
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    data = blob[8 + n :]
    metadata = header.pop("__metadata__", {})
    tensors = []
    for name, entry in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = entry["data_offsets"]
        tensors.append((name, entry["dtype"], entry["shape"], data[begin:end]))
    return tensors, metadata


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata} if metadata else {}
    offset = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)


def f32_values(raw):
    return struct.unpack(f"<{len(raw) // 4}f", raw)


def std_of(raw):
    xs = f32_values(raw)
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


def gauss_f32(rng, count, std):
    return struct.pack(f"<{count}f", *(rng.gauss(0.0, std) for _ in range(count)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", type=Path)
    parser.add_argument("dst", type=Path)
    parser.add_argument("--seed", type=int, default=25)
    args = parser.parse_args()

    config = json.loads((args.src / "config.json").read_text())
    text = config.get("text_config", config)
    if text.get("model_type", config.get("model_type", "")).split("_text")[0] not in (
        "qwen3_next",
        "qwen3_5",
        "qwen3_5_moe",
    ):
        sys.exit(f"{args.src}: model_type {text.get('model_type')!r} has no Qwen MTP head")
    hidden = text["hidden_size"]
    layer_types = text.get("layer_types")
    if layer_types is None:
        interval = text.get("full_attention_interval", 4)
        layer_types = [
            "full_attention" if (i + 1) % interval == 0 else "linear_attention"
            for i in range(text["num_hidden_layers"])
        ]
    twin = layer_types.index("full_attention")

    tensors, metadata = read_safetensors(args.src / "model.safetensors")
    by_name = {name: (dtype, shape, raw) for name, dtype, shape, raw in tensors}
    if any(name.startswith("mtp.") for name in by_name):
        sys.exit(f"{args.src}: already holds mtp.* tensors")
    if any(dtype != "F32" for _, (dtype, _, _) in by_name.items()):
        sys.exit(f"{args.src}: expected f32 tensors only")

    rng = random.Random(args.seed)
    norm_std = std_of(by_name["model.norm.weight"][2])
    mtp = [
        ("mtp.fc.weight", [hidden, 2 * hidden], 1.0 / math.sqrt(2 * hidden)),
        ("mtp.pre_fc_norm_embedding.weight", [hidden], norm_std),
        ("mtp.pre_fc_norm_hidden.weight", [hidden], norm_std),
    ]
    prefix = f"model.layers.{twin}."
    for name, (_, shape, raw) in sorted(by_name.items()):
        if name.startswith(prefix):
            mtp.append(("mtp.layers.0." + name[len(prefix) :], shape, std_of(raw)))
    mtp.append(("mtp.norm.weight", [hidden], norm_std))
    for name, shape, std in mtp:
        tensors.append((name, "F32", shape, gauss_f32(rng, math.prod(shape), std)))

    args.dst.mkdir(parents=True, exist_ok=True)
    text["mtp_num_hidden_layers"] = 1
    (args.dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if (args.src / "generation_config.json").exists():
        shutil.copyfile(args.src / "generation_config.json", args.dst / "generation_config.json")
    write_safetensors(args.dst / "model.safetensors", tensors, metadata)
    print(f"{args.dst}: {len(mtp)} mtp.* tensors (mtp.layers.0 mirrors model.layers.{twin}), seed {args.seed}")


if __name__ == "__main__":
    main()
