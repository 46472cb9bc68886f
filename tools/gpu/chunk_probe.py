#!/usr/bin/env python3
"""Reads a timeline of the tensor-core chunk kernels written by the probe build (-DHYLA_CHUNK_PROBE,
HYLA_CHUNK_PROBE_OUT=FILE; tools/gpu/chunk_probe.sh) and prints where the time goes: when the prepare
kernel finished its items, when the state kernel's TMA thread issued each chunk of sequence 0 and how
long it waited before (flags and stage), per chunk and per block.

    python3 tools/gpu/chunk_probe.py FILE LABEL
"""
import statistics
import struct
import sys


def main(path, label):
    data = open(path, "rb").read()
    words = struct.unpack(f"{len(data) // 8}Q", data)
    max_chunks, heads, row_blocks, _, side = words[:5]
    prep = words[5:5 + max_chunks * heads]
    state = words[5 + max_chunks * heads:]
    blocks = heads * row_blocks

    def rec(b, c, i):  # state block b, chunk c: 0 wait start, 1 issue
        return state[(b * max_chunks + c) * 2 + i]

    chunks = [c for c in range(max_chunks) if any(rec(b, c, 1) for b in range(blocks))]
    n = len(chunks)
    if n == 0:
        print(f"== {label}: no state records (sequence 0 has no chunk, or not the wgmma kernel)")
        return
    done = [t for t in prep if t]
    t0 = min(done + [rec(b, c, 0) for b in range(blocks) for c in range(n)])
    us = lambda t: (t - t0) / 1000.0
    print(f"== {label}: {'side by side' if side else 'one after the other'}, {n} chunks, "
          f"{heads} value heads, {blocks} state blocks of sequence 0; times in us from the first record")
    if done:
        s = sorted(done)
        k = len(s)
        rate = k * 0.8 / ((s[9 * k // 10] - s[k // 10]) / 1000.0)
        print(f"prepare items done: first {us(s[0]):.1f}, 10% {us(s[k // 10]):.1f}, "
              f"50% {us(s[k // 2]):.1f}, 90% {us(s[9 * k // 10]):.1f}, last {us(s[-1]):.1f}; "
              f"{rate:.1f} items/us between 10% and 90%")
    starts = sorted(rec(b, 0, 0) for b in range(blocks))
    ends = sorted(rec(b, n - 1, 1) for b in range(blocks))
    waits = [sum(rec(b, c, 1) - rec(b, c, 0) for c in range(n)) / 1000.0 for b in range(blocks)]
    print(f"state blocks: first wait at {us(starts[0]):.1f} .. {us(starts[-1]):.1f}; last issue at "
          f"{us(ends[0]):.1f} / {us(ends[blocks // 2]):.1f} / {us(ends[-1]):.1f} (min / median / "
          f"max); waits a block {statistics.median(waits):.1f} (median), {max(waits):.1f} (max)")
    step = max(1, n // 16)
    print("chunk  prepared (all heads)  issued (median block)  wait (median ns)")
    for c in sorted(set(list(range(0, n, step)) + [n - 1])):
        p = [prep[c * heads + h] for h in range(heads)]
        issued = statistics.median(rec(b, c, 1) for b in range(blocks))
        wait = statistics.median(rec(b, c, 1) - rec(b, c, 0) for b in range(blocks))
        ready = f"{us(max(p)):20.1f}" if all(p) else f"{'-':>20}"
        print(f"{c:5d}  {ready}  {us(issued):21.1f}  {wait:16.0f}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
