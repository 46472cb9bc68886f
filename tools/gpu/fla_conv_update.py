#!/usr/bin/env python3
"""Times fla's causal_conv1d_update (Triton) for the decode cases of ANCHORS.md, so that fla's whole
decode step of a layer (conv update + fused recurrent, two kernels; bench_fla.py times only the
recurrent) can be set beside Hyla's fused step, which does both. Runs on the H200 device machine with
fla's package in third_party_peer/fla (carried, never committed), bench_fla.py beside it:
  PYTHONPATH=third_party_peer python3 tools/gpu/fla_conv_update.py
Per case: conv_dim = 2 H d + HV d channels (GDN H16/HV32: 8192; KDA H32: 12288), bf16 inputs,
weights and cache ([B, conv_dim, 4], fla's layout), SiLU; CUDA-graph replay over a ring of caches
larger than L2 (bench_fla.py's graph_ring_ms), autotuned at each batch."""
import importlib
import math
import sys
import types

import torch

import bench_fla  # third_party_peer/bench_fla.py: fla's import stubs, graph ring timing

bench_fla.import_fla(types.SimpleNamespace(full_import=False))
for name in ('fla.modules.conv', 'fla.modules.conv.triton'):  # skip their heavy __init__.py
    if name not in sys.modules:
        parent = sys.modules[name.rsplit('.', 1)[0]]
        path = [p + '/' + name.rsplit('.', 1)[1] for p in parent.__path__]
        mod = types.ModuleType(name)
        mod.__path__ = path
        sys.modules[name] = mod
kernels = importlib.import_module('fla.modules.conv.triton.kernels')

dev = 'cuda'
l2 = torch.cuda.get_device_properties(0).L2_cache_size
print(f"fla causal_conv1d_update on {torch.cuda.get_device_name(0)}")
for op, D in (('gdn', 8192), ('kda', 12288)):
    for B in (1024, 256, 64, 8, 1):
        tuner = kernels.causal_conv1d_update_kernel
        if hasattr(tuner, 'cache'):
            tuner.cache.clear()  # autotune at this batch
        cache_bytes = B * D * 4 * 2
        R = max(1, min(64, math.ceil(3 * l2 / cache_bytes)))
        w = torch.randn(D, 4, device=dev, dtype=torch.bfloat16)
        xs = [torch.randn(B, D, device=dev, dtype=torch.bfloat16) for _ in range(R)]
        caches = [torch.randn(B, D, 4, device=dev, dtype=torch.bfloat16) for _ in range(R)]
        fns = [(lambda x=x, c=c: kernels.causal_conv1d_update(x, c, weight=w, activation='silu'))
               for x, c in zip(xs, caches)]
        with torch.inference_mode():
            ms = bench_fla.graph_ring_ms(fns)
        moved = B * D * 2 * 2 + cache_bytes * 2  # x + y, cache read + write
        print(f"TIME conv_update {op} B{B} D{D}: graph {ms * 1e3:9.2f} us ({moved / (ms * 1e-3) / 1e9:6.0f} GB/s, ring {R})")
