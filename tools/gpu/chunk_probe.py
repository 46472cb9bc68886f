#!/usr/bin/env python3
"""Reads a timeline of the tensor-core chunk kernels written by the probe build (-DHYLA_CHUNK_PROBE,
HYLA_CHUNK_PROBE_OUT=FILE; tools/gpu/chunk_probe.sh) and prints where the time goes: when the prepare
kernel finished its items, when the state kernel's TMA thread issued each chunk of sequence 0 and how
long it waited before (flags and stage), how long the state warpgroup waited for each chunk's tiles
(`full`), and the SM clock the state blocks ran at (clock64 over %globaltimer).

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

    words = 10

    # state block b, chunk c: 0 TMA wait start, 1 issue, 2-3 the state warpgroup's full wait, 4 its
    # SM clock; waits (ns): 5 state for the output warpgroup's reads, 6 output for its o store,
    # 7 output for S^T, 8 output for Delta^T; 9 the SM's id
    def rec(b, c, i):
        return state[(b * max_chunks + c) * words + i]

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
    full = [sum(rec(b, c, 3) - rec(b, c, 2) for c in range(n)) / 1000.0 for b in range(blocks)]
    ghz = [(rec(b, n - 1, 4) - rec(b, 0, 4)) / max(1, rec(b, n - 1, 3) - rec(b, 0, 3))
           for b in range(blocks)] if n > 1 else [0.0]
    print(f"state warpgroup: waits for tiles a block {statistics.median(full):.1f} us (median), "
          f"{max(full):.1f} (max); SM clock {min(ghz):.2f} .. {max(ghz):.2f} GHz "
          f"(median {statistics.median(ghz):.2f})")
    for i, what in ((5, "state warpgroup for the output one's reads"), (6, "output warpgroup for its o store"),
                    (7, "output warpgroup for S^T"), (8, "output warpgroup for Delta^T")):
        per = [sum(rec(b, c, i) for c in range(n)) / 1000.0 for b in range(blocks)]
        print(f"waits of the {what}: {statistics.median(per):.1f} us a block (median), {max(per):.1f} (max)")
    # Each block's chunk period against its SM and whether the other SM of its TPC (SM ids 2i, 2i + 1)
    # also runs a state block of sequence 0.
    sm = {b: rec(b, 0, 9) for b in range(blocks)}
    busy = set(sm.values())
    period = {b: (rec(b, n - 1, 1) - rec(b, 0, 1)) / max(1, n - 1) / 1000.0 for b in range(blocks)}
    for pair in (True, False):
        ps = [period[b] for b in range(blocks) if ((sm[b] ^ 1) in busy) == pair]
        if ps:
            print(f"blocks whose TPC partner SM {'also runs' if pair else 'does not run'} a state block: "
                  f"{len(ps)}, us a chunk {min(ps):.3f} / {statistics.median(ps):.3f} / {max(ps):.3f}")
    cells = [f"{sm[b]:3d}:{period[b]:.2f}" for b in sorted(range(blocks), key=lambda b: sm[b])]
    print("SM id: us a chunk, by SM id")
    for i in range(0, len(cells), 12):
        print("  " + "  ".join(cells[i:i + 12]))
    step = max(1, n // 16)
    print("chunk  prepared (all heads)  issued (median block)  wait (median ns)  tiles wait (median ns)")
    for c in sorted(set(list(range(0, n, step)) + [n - 1])):
        p = [prep[c * heads + h] for h in range(heads)]
        issued = statistics.median(rec(b, c, 1) for b in range(blocks))
        wait = statistics.median(rec(b, c, 1) - rec(b, c, 0) for b in range(blocks))
        ready = f"{us(max(p)):20.1f}" if all(p) else f"{'-':>20}"
        tiles = statistics.median(rec(b, c, 3) - rec(b, c, 2) for b in range(blocks))
        print(f"{c:5d}  {ready}  {us(issued):21.1f}  {wait:16.0f}  {tiles:22.0f}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
