#!/usr/bin/env bash
# Runs on the H200 device machine: Nsight Compute on one decode-step launch of the benchmark
# (source-level stall sampling), then the per-instruction table as CSV. Results under $OUT:
# decode.ncu-rep is left there (too large to come back), decode_sass.csv and decode_ncu.log come
# back; summarise them here with `python3 tools/gpu/ncu_sass_summary.py DIR/decode_sass.csv`.
#   bash tools/gpu/decode_ncu.sh gdn|kda BATCH      (the tiling the entry chooses for BATCH)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/hyla_out}
mkdir -p "$OUT"
which=${1:?gdn or kda}
batch=${2:?batch size}
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYLA_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a > "$OUT/configure.log" 2>&1
cmake --build build-gpu -j 16 --target hyla_bench_gated_delta_rule_decode > "$OUT/build.log" 2>&1
ncu=/usr/local/cuda/bin/ncu
# --launch-skip 1: the first launch is the benchmark's check against the CPU body.
"$ncu" --kernel-name regex:decode_step_kernel --launch-skip 1 -c 1 --section SourceCounters \
  --section WarpStateStats --section SpeedOfLight --section Occupancy --import-source no \
  -o "$OUT/decode" -f build-gpu/bin/hyla_bench_gated_delta_rule_decode --only "$which" \
  --batch "$batch" --rows 99999 > "$OUT/decode_ncu.log" 2>&1  # no tiling has 99999 rows
"$ncu" --import "$OUT/decode.ncu-rep" --page source --csv --print-source sass > "$OUT/decode_sass.csv"
"$ncu" --import "$OUT/decode.ncu-rep" --page details >> "$OUT/decode_ncu.log"
grep -E "Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued" "$OUT/decode_ncu.log" || true
