#!/usr/bin/env python3
"""Chunk prefill side by side: hyla_bench_gated_delta_rule_chunk's JSON lines and bench_fla.py's JSON
from the same device call, with issue 26's musts.

    python3 tools/gpu/chunk_vs_fla.py HYLA.jsonl FLA.json [FLA.json ...]
"""
import json
import sys

# (op, H, HV, seqs, tokens) -> issue 26's must (ms)
MUSTS = {('gdn', 16, 32, 1, 65536): 1.40, ('gdn', 16, 32, 16, 65536): 1.30,
         ('gdn', 16, 32, 1, 4096): 0.30, ('kda', 32, 32, 1, 65536): 4.10}


def main():
    hyla = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    fla = [r for path in sys.argv[2:] for r in json.load(open(path)).get('results', [])]
    fla_ms = {}
    for r in fla:
        if not r.get('group', '').endswith('prefill') or 'ms' not in r or r.get('layout') != 'kv':
            continue
        if r.get('variant', 'plain') != 'plain' or r.get('intracard'):
            continue
        fla_ms[(r['op'], r['H'], r['HV'], r['n_seqs'], r['tokens'])] = r['ms']
    print('| case | hyla ms | TFLOP/s | fla ms | hyla / fla speed | must | holds |')
    print('|---|---:|---:|---:|---:|---:|---|')
    for h in hyla:
        key = (h['op'], h['H'], h['HV'], h['seqs'], h['tokens'])
        f = fla_ms.get(key)
        must = MUSTS.get(key)
        ratio = f'{f / h["ms"]:.2f}x' if f else '-'
        print(f'| {h["name"]} | {h["ms"]:.4f} | {h["tflops"]:.1f} | '
              f'{f"{f:.4f}" if f else "-"} | {ratio} | {must if must else "-"} | '
              f'{("yes" if h["ms"] <= must else "no") if must else "-"} |')


if __name__ == '__main__':
    main()
