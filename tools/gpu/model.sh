#!/usr/bin/env bash
# Runs on the H200 device machine (see .library/device): the whole model on the GPU.
#   bash tools/gpu/model.sh [tests|demo|kbench|ckpt|bench|tpbench|llama-build|llama-bench|sidebyside|prefix|spec|serve|all]...
#   (default: tests demo)
# tests: build hyla + every GPU test, run `ctest -L gpu`. demo: `hyla generate --device cuda` on the
# embedded demo model. kbench: the kernel benchmarks of bench/ (paged attention, MoE). ckpt: the benchmark checkpoint (../shared/tools/make_bench_checkpoint.py, Qwen3
# tokenizer from third_party_peer/qwen3_tokenizer) into $WORK/bench-ckpt (kept while the machine is warm).
# bench: `hyla bench` on it (table + JSON). llama-build: llama.cpp from third_party_peer/llamacpp.tar.gz and
# its GGUF conversion of the checkpoint (../shared/tools/llamacpp_side_by_side.sh build convert, ~6 min);
# llama-bench: its benchmark rows (side_by_side.sh bench), to run in the same call as bench.
# sidebyside: all of it in one call (the machine is released 30 s after a call, so nothing survives
# to the next): llama.cpp builds in the background while the checkpoint is written and `hyla bench`
# runs, then llama.cpp converts and runs its rows (~9 min in all).
# tpbench: with ckpt, `hyla bench` on one GPU and with --tensor-parallel over every GPU of the
# machine (issue 27's x2 figures; one GPU: the single run only).
# prefix: `hyla bench --workload prefix` on the demo model (the prefix cache off and on).
# spec: `hyla bench --workload speculative` on the demo model, and `hyla generate` on a counting
# prompt with speculation off and on.
# serve: `hyla serve --device cuda` on the demo model driven by hyla_serve_load at 1, 16, 64, 256
# streams, next to `hyla generate` and `hyla bench` there (tools/serve_bench.sh; its files under
# $OUT/serve_bench). Needs the tokenizer in the build (tokenizer_deps.sh; ~3 min in all).
# chunktest: the chunk kernels' GPU tests alone. chunkprof: Nsight Compute on the tensor-core chunk
# kernels of the bench's --quick rows, or of CHUNKPROF_CASES (e.g. "--only kda") (summary lines;
# chunk_ncu.txt and chunk_sass.csv under $OUT). chunk: hyla_bench_gated_delta_rule_chunk and fla's
# chunk kernels (third_party_peer/fla with bench_fla.py beside it, carried) on issue 26's shapes,
# side by side (tools/gpu/chunk_vs_fla.py); FLA_OPS="gdn" runs fla's GDN rows only.
# Everything printed goes to $OUT/summary.txt; logs of failing steps are printed.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/hyla_out}
WORK=${WORK:-/tmp/hyla_work}
LOGS=${LOGS:-$WORK/logs}
# ../shared does not travel to the device: the two scripts of ../shared/tools are carried in
# third_party_peer/tools (git-ignored; carry third_party_peer).
SHARED=${SHARED:-third_party_peer}
mkdir -p "$OUT" "$WORK" "$LOGS"
exec > >(tee "$OUT/summary.txt") 2>&1
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests demo)
want() { [[ " ${steps[*]} " == *" $1 "* ]] || [[ " ${steps[*]} " == *" all "* ]]; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv,noheader
echo "git there: $(git rev-parse --short HEAD 2>/dev/null), $(git status --short 2>/dev/null | wc -l) changed paths"
start=$SECONDS
source tools/gpu/tokenizer_deps.sh
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DHYLA_CUDA=ON -DHYLA_BENCH=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90a > "$LOGS/configure.log" 2>&1 || { tail -30 "$LOGS/configure.log"; exit 1; }
targets=(hyla_cli)
want tests && targets+=(hyla_gpu_tests)
want kbench && targets+=(hyla_bench_paged_attention hyla_bench_moe hyla_bench_linear)
{ want chunk || want chunktest || want chunkprof; } &&
  targets+=(hyla_bench_gated_delta_rule_chunk hyla_gpu_tests)
want serve && targets+=(hyla_serve_load)
cmake --build build-gpu -j 16 --target "${targets[@]}" > "$LOGS/build.log" 2>&1 ||
  { grep -E "error" -A5 "$LOGS/build.log" | head -80; exit 1; }
echo "build: $((SECONDS - start)) s"
hyla=./build-gpu/bin/hyla
if want tests; then
  t=$SECONDS
  (cd build-gpu && timeout 400 ctest -L gpu --output-on-failure -j 4 > "$OUT/gpu_tests.log" 2>&1)
  echo "gpu tests: $((SECONDS - t)) s"
  grep -E "tests passed|Failed|FAILED|\*\*\*|Skipped" "$OUT/gpu_tests.log" | head -40
fi
if want demo; then
  grep -E "Hyla: tokenizer" "$LOGS/configure.log"
  prompt="It was a bright cold morning, and"
  if $hyla tokenize --help > /dev/null 2>&1; then
    echo "== demo on the GPU: $prompt"
    timeout 120 $hyla generate --device cuda --max-new-tokens 48 --verbose "$prompt" 2>&1 | tail -8
    echo "== demo on the CPU"
    timeout 120 $hyla generate --device cpu --max-new-tokens 48 "$prompt" 2>&1 | tail -4
  else
    # No tokenizer in this build: the prompt as ids (models/hyla-demo's tokenizer).
    ids="2354 357 259 3283 3330 1820 12 276"
    echo "== demo on the GPU (ids)"
    timeout 120 $hyla generate --device cuda --max-new-tokens 48 --verbose --prompt-ids "$ids" 2>&1 | tail -8
    echo "== demo on the CPU (ids)"
    timeout 120 $hyla generate --device cpu --max-new-tokens 48 --prompt-ids "$ids" 2>&1 | tail -3
  fi
fi
if want kbench; then
  for b in paged_attention moe; do
    echo "== hyla_bench_$b"
    timeout 200 ./build-gpu/bin/hyla_bench_$b 2>&1 | tail -30
  done
fi
if want chunktest; then  # the chunk kernels' GPU tests alone (the [ tc spread ] lines: the errors)
  timeout 300 ./build-gpu/tests/hyla_gpu_tests --gtest_filter='GatedDeltaRuleChunkCuda*' \
    > "$OUT/chunk_tests.log" 2>&1
  echo "chunk tests rc=$?"
  grep -E "tc spread|OK \]|FAILED|Failure|error|Expected|Which is" "$OUT/chunk_tests.log" | head -60
fi
if want chunk; then  # chunk prefill at issue 26's shapes, then fla's chunk kernels on the same shapes
  echo "== hyla_bench_gated_delta_rule_chunk"
  timeout 300 ./build-gpu/bin/hyla_bench_gated_delta_rule_chunk --out "$OUT/hyla_chunk.jsonl" 2>&1 | tail -12
  if [[ -d third_party_peer/fla ]]; then
    # Two runs, so that KDA's autotuning covers only its one row (one run of both did not finish
    # KDA inside 400 s): GDN at the three GDN rows, KDA at T 65536.
    for op in ${FLA_OPS:-gdn kda}; do
      echo "== fla $op"
      shapes=(--prefill-T 65536,4096 --varlen 16x4096)
      [[ $op == kda ]] && shapes=(--prefill-T 65536 --varlen "")
      PYTHONUNBUFFERED=1 PYTHONPATH=third_party_peer timeout 300 python3 third_party_peer/bench_fla.py \
        --only ${op}_prefill "${shapes[@]}" --no-intracard --no-kda-gate-variants \
        --out "$OUT/fla_$op.json" > "$LOGS/fla_$op.log" 2>&1
      echo "fla $op rc=$?"
      grep -E "TIME|CHECK|rror" "$LOGS/fla_$op.log" | sed -E 's/^\[ *[0-9.]+s\] //' | tail -12
    done
    python3 tools/gpu/chunk_vs_fla.py "$OUT/hyla_chunk.jsonl" "$OUT"/fla_*.json
  fi
fi
if want chunkprof; then  # Nsight Compute on one call of each tensor-core chunk kernel
  ncu=/usr/local/cuda/bin/ncu
  "$ncu" --kernel-name regex:'mma_(prepare|state)' --launch-skip 4 -c 2 --section SourceCounters \
    --section WarpStateStats --section SpeedOfLight --section Occupancy \
    --section MemoryWorkloadAnalysis --import-source no -o "$WORK/chunk" -f \
    ./build-gpu/bin/hyla_bench_gated_delta_rule_chunk ${CHUNKPROF_CASES:---quick} > "$LOGS/ncu.log" 2>&1 ||
    tail -20 "$LOGS/ncu.log"
  "$ncu" --import "$WORK/chunk.ncu-rep" --page details > "$OUT/chunk_ncu.txt"
  "$ncu" --import "$WORK/chunk.ncu-rep" --page source --csv --print-source sass > "$OUT/chunk_sass.csv"
  grep -E "mma_|Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Throughput" \
    "$OUT/chunk_ncu.txt" | head -40
fi
ckpt=$WORK/bench-ckpt
if want ckpt && [[ ! -f $ckpt/config.json ]]; then
  t=$SECONDS
  python3 "$SHARED/tools/make_bench_checkpoint.py" --out "$ckpt" --tokenizer-dir third_party_peer/qwen3_tokenizer \
    > "$LOGS/ckpt.log" 2>&1 || { tail -20 "$LOGS/ckpt.log"; }
  echo "checkpoint: $((SECONDS - t)) s, $(du -sh "$ckpt" | cut -f1)"
fi
if want llama-build; then
  bash "$SHARED/tools/llamacpp_side_by_side.sh" third_party_peer/llamacpp.tar.gz "$ckpt" "$WORK/llama" \
    "$OUT/llamacpp.json" build convert
fi
if want bench; then
  echo "== hyla bench"
  timeout 400 $hyla bench --model "$ckpt" --device cuda --profile --json "$OUT/hyla_bench.json" 2>&1 | tail -80
fi
if want tpbench; then  # issue 27: the checkpoint on one GPU and split over every GPU, one call
  gpus=$(nvidia-smi -L | wc -l)
  echo "== hyla bench, 1 GPU"
  timeout 300 $hyla bench --model "$ckpt" --device cuda --json "$OUT/tp1.json" 2>&1 | tail -12
  if [[ $gpus -ge 2 ]]; then
    echo "== hyla bench --tensor-parallel $gpus (--profile: the all-reduce per step)"
    timeout 400 $hyla bench --model "$ckpt" --device cuda --tensor-parallel "$gpus" --profile \
      --json "$OUT/tp$gpus.json" 2>&1 | tail -60
  else
    echo "one GPU: no tensor-parallel run"
  fi
fi
if want llama-bench; then
  echo "== llama.cpp"
  timeout 300 bash "$SHARED/tools/llamacpp_side_by_side.sh" third_party_peer/llamacpp.tar.gz "$ckpt" "$WORK/llama" \
    "$OUT/llamacpp.json" bench
fi
if want sidebyside; then
  (bash "$SHARED/tools/llamacpp_side_by_side.sh" third_party_peer/llamacpp.tar.gz "$ckpt" "$WORK/llama" \
    "$OUT/llamacpp.json" build > "$LOGS/llama_build.log" 2>&1) &
  llama_build=$!
  if [[ ! -f $ckpt/config.json ]]; then
    t=$SECONDS
    python3 "$SHARED/tools/make_bench_checkpoint.py" --out "$ckpt" \
      --tokenizer-dir third_party_peer/qwen3_tokenizer > "$LOGS/ckpt.log" 2>&1 || tail -20 "$LOGS/ckpt.log"
    echo "checkpoint: $((SECONDS - t)) s, $(du -sh "$ckpt" | cut -f1)"
  fi
  echo "== hyla bench (llama.cpp building beside it on the CPU)"
  t=$SECONDS
  timeout 300 $hyla bench --model "$ckpt" --device cuda --json "$OUT/hyla_bench.json" 2>&1 | tail -30
  echo "hyla bench: $((SECONDS - t)) s"
  wait $llama_build; echo "llama.cpp build rc=$?"; tail -3 "$LOGS/llama_build.log"
  timeout 240 bash "$SHARED/tools/llamacpp_side_by_side.sh" third_party_peer/llamacpp.tar.gz "$ckpt" \
    "$WORK/llama" "$OUT/llamacpp.json" convert bench
fi
if want prefix; then
  echo "== prefix cache workload (hyla bench --workload prefix) on the demo model"
  timeout 300 $hyla bench --device cuda --workload prefix --new 32 --json "$OUT/prefix_workload.json" 2>&1 | tail -8
fi
if want spec; then
  echo "== speculative decoding (hyla bench --workload speculative) on the demo model"
  timeout 300 $hyla bench --device cuda --workload speculative --batch 1 --batch 16 --batch 64 \
    --new 128 --json "$OUT/spec_workload.json" 2>&1 | tail -24
  prompt="1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"
  for spec in off ngram; do
    echo "== generate --temperature 0 --speculative $spec: $prompt"
    timeout 120 $hyla generate --device cuda --temperature 0 --speculative $spec \
      --max-new-tokens 128 "$prompt" 2>&1 | tail -2
  done
fi
if want serve; then
  if [[ -x ./build-gpu/bin/hyla_serve_load ]]; then
    echo "== serving: hyla serve --device cuda on the demo model"
    t=$SECONDS
    BUILD=build-gpu DEVICE=cuda OUT="$OUT/serve_bench" timeout 500 bash tools/serve_bench.sh models/hyla-demo
    echo "serve bench: $((SECONDS - t)) s"
  else
    echo "== serving: no hyla_serve_load (the build has no HTTP server: $(grep -E 'HTTP server' "$LOGS/configure.log"))"
  fi
fi
