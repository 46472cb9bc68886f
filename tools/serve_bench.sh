#!/usr/bin/env bash
# The serving benchmark: hyla_serve_load (bench/serve_load.cpp) against `hyla serve` at 1, 16, 64
# and 256 concurrent streams, next to the engine alone on the same model (`hyla generate`, one
# stream, and `hyla bench`'s batched decode at the same batch sizes): the gap is the server's cost.
#   bash tools/serve_bench.sh [MODEL_DIR | HOST:PORT]   (default: models/hyla-demo)
# MODEL_DIR: starts BUILD/bin/hyla serve on it (an ephemeral port, --device DEVICE), runs the load
# levels, stops it, then runs hyla generate and hyla bench there. HOST:PORT: only the load levels,
# against a server already running there.
# Environment: BUILD (default build), DEVICE (cpu | cuda | auto; default auto), OUT (default
# BUILD/serve_bench: serve_load.jsonl, server.log, hyla_bench.json, summary.txt), CONCURRENCY
# (default 1,16,64,256), REQUESTS per level (default 64; a level runs at least its concurrency),
# PROMPT_WORDS (default 48:56, about 64 tokens), MAX_TOKENS (default 64), THREADS (the model's CPU
# threads; default hyla's), SERVE_ARGS (more `hyla serve` options, e.g. --http-threads 8). Needs BUILD/bin/hyla and BUILD/bin/hyla_serve_load (cmake --build BUILD
# --target hyla_cli hyla_serve_load).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target=${1:-models/hyla-demo}
BUILD=${BUILD:-build}
DEVICE=${DEVICE:-auto}
OUT=${OUT:-$BUILD/serve_bench}
CONCURRENCY=${CONCURRENCY:-1,16,64,256}
REQUESTS=${REQUESTS:-64}
PROMPT_WORDS=${PROMPT_WORDS:-48:56}
MAX_TOKENS=${MAX_TOKENS:-64}
hyla=$BUILD/bin/hyla
load=$BUILD/bin/hyla_serve_load
for binary in "$hyla" "$load"; do
  if [[ ! -x $binary ]]; then
    echo "serve_bench.sh: $binary is missing: cmake --build $BUILD --target hyla_cli hyla_serve_load" >&2
    exit 1
  fi
done
mkdir -p "$OUT"
rm -f "$OUT/serve_load.jsonl"
exec > >(tee "$OUT/summary.txt") 2>&1
threads=()
[[ -n ${THREADS:-} ]] && threads=(--threads "$THREADS")
largest=$(tr ',' '\n' <<< "$CONCURRENCY" | sort -n | tail -1)

echo "serve_bench.sh: $(date -u +%Y-%m-%d) commit $(git rev-parse --short HEAD 2>/dev/null)" \
  "$(git status --short 2>/dev/null | grep -q . && echo '(with changes)'); $(nproc) CPUs:" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"

server=
stop_server() {
  if [[ -n $server ]] && kill -0 "$server" 2> /dev/null; then
    kill -TERM "$server"
    wait "$server" 2> /dev/null
  fi
  server=
}
trap stop_server EXIT
trap 'stop_server; exit 1' INT TERM

if [[ $target =~ ^([0-9.]+):([0-9]+)$ ]]; then
  host=${BASH_REMATCH[1]} port=${BASH_REMATCH[2]} model=
else
  model=$target
  host=127.0.0.1
  # Every level's streams run at once: --max-running and --max-waiting hold the largest, and the
  # memory is sized for that many requests of 2 x 128 tokens (prompt + max_tokens fit well).
  "$hyla" serve --model "$model" --device "$DEVICE" --port 0 --max-running "$largest" \
    --max-waiting $((largest + 64)) --default-max-tokens 128 "${threads[@]}" ${SERVE_ARGS:-} \
    > "$OUT/server.log" 2>&1 &
  server=$!
  port=
  for _ in $(seq 1200); do
    port=$(sed -n 's|.* on http://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$OUT/server.log")
    [[ -n $port ]] && break
    kill -0 "$server" 2> /dev/null || break
    sleep 0.1
  done
  if [[ -z $port ]]; then
    echo "serve_bench.sh: hyla serve did not start:"
    cat "$OUT/server.log"
    exit 1
  fi
  head -2 "$OUT/server.log"
fi

echo "== hyla_serve_load: concurrency $CONCURRENCY, $REQUESTS requests per level (at least the" \
  "concurrency), prompts of $PROMPT_WORDS words, max_tokens $MAX_TOKENS, greedy, streamed"
"$load" --host "$host" --port "$port" --concurrency "$CONCURRENCY" --requests "$REQUESTS" \
  --prompt-words "$PROMPT_WORDS" --max-tokens "$MAX_TOKENS" --timeout 600 \
  --json "$OUT/serve_load.jsonl" | grep -v '^{'
load_rc=${PIPESTATUS[0]}
stop_server

if [[ -n $model ]]; then
  # The prompt is the built-in text's first 56 words, near the load's prompts in length.
  prompt="The lighthouse keeper counted the ships that passed each night and wrote their names in a book with a green cover. On the first warm day of spring the children ran down to the river to see whether the ice had gone. She opened the letter slowly, because she already knew what it would say about the farm. A small grey cat"
  echo "== hyla generate (one stream, no server): $MAX_TOKENS new tokens"
  "$hyla" generate --model "$model" --device "$DEVICE" --temperature 0 \
    --max-new-tokens "$MAX_TOKENS" "${threads[@]}" "$prompt" 2>&1 | tail -1
  echo "== hyla bench (the engine alone): decode of 1 sequence, batches of $CONCURRENCY"
  "$hyla" bench --model "$model" --device "$DEVICE" --prompt 64 --depth 0 \
    --batch "$CONCURRENCY" --batch-prompt 64 --new "$MAX_TOKENS" "${threads[@]}" \
    --json "$OUT/hyla_bench.json" 2>&1 | grep '^|'
fi
echo "serve_bench.sh: files in $OUT"
exit "$load_rc"
