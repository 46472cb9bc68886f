#!/usr/bin/env bash
# Runs on the H200 device machine (this machine has no cuobjdump): the SASS of the decode kernels
# whose mangled name contains PATTERN, e.g. the GDN f32 R32w8 overlapped step:
#   bash tools/gpu/sass_dump.sh decode_step_kernelIfLb0ELi128ELi32ELi8ELi1ELb1EE [UNIT.cu]
# (template arguments in order: state type, KDA, d_k, rows, warps, tokens, overlapped).
# Output: $OUT/sass_<n>.txt, one file per kernel matched (at most 4).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/hyla_out}
pattern=$1
unit=${2:-src/kernels/cuda/gated_delta_rule_decode.cu}
tmp=$(mktemp -d)
mkdir -p "$OUT"
nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -I src -cubin "$unit" -o "$tmp/unit.cubin" ||
  exit 1
cuobjdump -sass "$tmp/unit.cubin" > "$tmp/all.sass" || exit 1
# One kernel = from its "Function :" line to the next one.
awk -v pat="$pattern" -v out="$OUT" '
  /Function :/ { on = index($0, pat) > 0; if (on) { n++; file = out "/sass_" n ".txt" } }
  on && n <= 4 { print > file }' "$tmp/all.sass"
ls "$OUT"/sass_*.txt 2>/dev/null || echo "no kernel matches $pattern"
