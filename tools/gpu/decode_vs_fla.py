#!/usr/bin/env python3
"""Hyla's decode benchmark beside fla's, from the files one `tools/gpu/decode.sh bench overlap fla`
call writes: the side-by-side table of docs/perf-history.md "GPU decode" and the verdict on each
decode row of ../shared/ANCHORS.md section 4 (must / goal).

    python3 tools/gpu/decode_vs_fla.py HYLA_JSONL [HYLA_OVERLAP_JSONL] FLA_JSON

HYLA_JSONL: hyla_bench_gated_delta_rule_decode's JSON lines (the entry's rows, "default": true,
are used); HYLA_OVERLAP_JSONL: the same run with --overlap; FLA_JSON: bench_fla.py --out. Hyla's
figure of a case is the faster of plain and overlapped. fla's peer: GDN's public kernel (fla has
no in-place GDN decode), KDA's in-place slot-pool kernel (its public one, fresh state, also
printed). Times are fla's CUDA-graph ring replays, like Hyla's.
"""
import json
import sys

# ANCHORS.md section 4, decode rows: (name, op, batches, unit, must, goal). "us": the time of
# each batch at most the figure; "GB/s": the slowest batch's rate at least the figure.
TARGETS = [
    ("GDN decode B=1 (graph)", "GDN", [1], "us", 3.0, 2.0),
    ("GDN decode B=8", "GDN", [8], "us", 8.0, 6.0),
    ("GDN decode B>=256, fp32 state", "GDN", [256, 1024], "GB/s", 4100.0, 4300.0),
    ("KDA decode B>=64, fp32 state, in place", "KDA", [64, 256, 1024], "GB/s", 3900.0, 4200.0),
    ("KDA decode B=1", "KDA", [1], "us", 3.5, 2.5),
]


def hyla_rows(path):
    """{(op, B): row} for the entry's choice ("default") of every case in a JSON-lines file."""
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if r.get("default"):
                rows[(r["case"].split()[0], int(r["B"]))] = r
    return rows


def fla_times(path):
    """{(op, api, B): (us, GB/s)} of fla's decode graph replays."""
    with open(path) as f:
        data = json.load(f)
    times = {}
    for r in data.get("results", []):
        if r.get("group") not in ("gdn_decode", "kda_decode") or r.get("layout") != "vk":
            continue
        times[(r["op"].upper(), r["api"], int(r["B"]))] = (r["ms_graph"] * 1e3, r["gbps_graph"])
    return times


def tiling(r):
    name = {"split": "S", "warp": "W", "bulk": "bulk"}.get(r["kernel"], "R")
    return f"{name}{r['rows_per_block']}w{r['warps']}"


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit(__doc__)
    plain = hyla_rows(argv[1])
    overlap = hyla_rows(argv[2]) if len(argv) == 4 else {}
    fla = fla_times(argv[-1])
    if not plain or not fla:
        sys.exit(f"no rows read: {len(plain)} from {argv[1]}, {len(fla)} from {argv[-1]}")

    peer_api = {"GDN": "public", "KDA": "pool"}
    best = {}  # (op, B) -> (us, GB/s) of the faster of plain and overlapped
    print("| case | B | hyla plain µs (tiling) | hyla overlapped µs (tiling) | best GB/s | fla µs "
          "| plain / fla | overlapped / fla |")
    print("|---|---|---|---|---|---|---|---|")
    for (op, B), p in sorted(plain.items()):
        o = overlap.get((op, B))
        peer = fla.get((op, peer_api[op], B))
        runs = [p] + ([o] if o else [])
        fast = min(runs, key=lambda r: r["us"])
        best[(op, B)] = (fast["us"], fast["gbps"])
        o_cell = f"{o['us']:.2f} ({tiling(o)})" if o else "-"
        if peer:
            ratio_p = f"{peer[0] / p['us']:.2f}x"
            ratio_o = f"{peer[0] / o['us']:.2f}x" if o else "-"
            peer_cell = f"{peer[0]:.2f}"
        else:
            ratio_p = ratio_o = peer_cell = "-"
        label = f"{op} (fla {peer_api[op]})"
        print(f"| {label} | {B} | {p['us']:.2f} ({tiling(p)}) | {o_cell} | {fast['gbps']:.0f} | "
              f"{peer_cell} | {ratio_p} | {ratio_o} |")
    public = [(B, t) for (op, api, B), t in sorted(fla.items()) if op == "KDA" and api == "public"]
    if public:
        cells = []
        for B, (us, _) in public:
            ours = best.get(("KDA", B))
            cells.append(f"B={B} {us:.2f} µs" + (f" ({us / ours[0]:.2f}x)" if ours else ""))
        print("\nfla's public KDA (fresh state), and the best of Hyla against it: " + ", ".join(cells))

    print("\nANCHORS.md section 4 (decode rows; Hyla's best of plain and overlapped):\n")
    print("| row | Hyla | fla | must | goal |")
    print("|---|---|---|---|---|")
    for name, op, batches, unit, must, goal in TARGETS:
        have = [best[(op, B)] for B in batches if (op, B) in best]
        if len(have) != len(batches):
            print(f"| {name} | (not measured) | | {must} | {goal} |")
            continue
        peer = [fla.get((op, peer_api[op], B)) for B in batches]
        if unit == "us":
            value = max(us for us, _ in have)
            peer_v = max(t[0] for t in peer) if all(peer) else None
            holds_must, holds_goal = value <= must, value <= goal
            fmt = lambda v: f"{v:.2f} µs"
        else:
            value = min(gbps for _, gbps in have)
            peer_v = min(t[1] for t in peer) if all(peer) else None
            holds_must, holds_goal = value >= must, value >= goal
            fmt = lambda v: f"{v / 1000:.2f} TB/s"
        verdict = lambda ok, target: f"{fmt(target)} {'HOLDS' if ok else 'not met'}"
        print(f"| {name} | {fmt(value)} | {fmt(peer_v) if peer_v else '-'} | "
              f"{verdict(holds_must, must)} | {verdict(holds_goal, goal)} |")


if __name__ == "__main__":
    main(sys.argv)
