#!/usr/bin/env python3
"""Summarises an Nsight Compute per-instruction CSV (`ncu --import R --page source --csv
--print-source sass`): share of stall samples by reason, then the instructions with the most
samples (index, share, main reason, SASS).   python3 tools/gpu/ncu_sass_summary.py FILE [TOP]"""
import csv
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    rows = list(csv.reader(open(sys.argv[1], newline="")))
    # Row 0 names the kernel; row 1 is the header; then one row per instruction.
    header, data = rows[1], rows[2:]
    col = {name: i for i, name in enumerate(header)}
    samples = "Warp Stall Sampling (All Samples)"
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def num(row, name):
        value = row[col[name]].replace(",", "")
        return float(value) if value else 0.0

    total = sum(num(r, samples) for r in data)
    executed = sum(num(r, "Instructions Executed") for r in data)
    print(f"{rows[0][1] if len(rows[0]) > 1 else ''}")
    print(f"{len(data)} SASS instructions, {executed:.0f} warp-instructions executed, "
          f"{total:.0f} stall samples")
    if total == 0:
        return 0
    by_reason = {r: sum(num(x, r) for x in data) for r in reasons}
    for reason, value in sorted(by_reason.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {reason[6:]:24s} {100 * value / total:5.1f}%")
    print(f"top {top} instructions by samples:")
    ranked = sorted(enumerate(data), key=lambda ir: -num(ir[1], samples))[:top]
    for index, row in ranked:
        main_reason = max(reasons, key=lambda r: num(row, r))[6:]
        print(f"  {index:5d} {100 * num(row, samples) / total:5.1f}% {main_reason:14s} "
              f"{row[col['Source']][:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
