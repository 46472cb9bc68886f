#!/usr/bin/env bash
# Runs on the H200 device machine: the tensor-core chunk kernels' timeline. Builds the chunk
# benchmark with -DHYLA_CHUNK_PROBE (the prepare kernel records when each (chunk, value head) item
# is done; for the roles state kernel's blocks of sequence 0, its TMA thread when it starts waiting
# for a chunk (flags, then the stage) and when it issues the chunk's loads, the state warpgroup's
# wait for the chunk's tiles with its SM clock and SM id, and the warpgroups' waits for each
# other), runs one case side by side and one after the other (HYLA_CHUNK_PROBE_MODE), and prints
# tools/gpu/chunk_probe.py's summary of each (with each block's chunk time by SM id). Times come from %globaltimer; the probe's stores cost a little, so take the bench's own
# rows (tools/gpu/model.sh chunk) for times.
#   bash tools/gpu/chunk_probe.sh ["CASE"]   (a case name of the bench; default "gdn H16/HV32 T65536")
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/hyla_out}
mkdir -p "$OUT"
cmake -S . -B build-probe -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYLA_CUDA=ON -DHYLA_BENCH=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-DHYLA_CHUNK_PROBE > /dev/null 2>&1 &&
  cmake --build build-probe -j 16 --target hyla_bench_gated_delta_rule_chunk > "$OUT/probe_build.log" 2>&1 ||
  { grep -E "error" -A5 "$OUT/probe_build.log" | head -40; exit 1; }
case=${1:-gdn H16/HV32 T65536}
for mode in side sequential; do
  HYLA_CHUNK_PROBE_MODE=$mode HYLA_CHUNK_PROBE_OUT="$OUT/chunk_probe_$mode.bin" \
    ./build-probe/bin/hyla_bench_gated_delta_rule_chunk --only "$case" > /dev/null ||
    { echo "bench failed ($mode)"; continue; }
  python3 tools/gpu/chunk_probe.py "$OUT/chunk_probe_$mode.bin" "$case, $mode" | tee -a "$OUT/chunk_probe.txt"
done
