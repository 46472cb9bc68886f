#!/usr/bin/env python3
"""Writes MODEL_CARD.md of the demo model from the files tools/demo/train.py leaves in its folder.

    python3 tools/demo/make_card.py models/hyla-demo

Reads stats.json (training and corpus), reference.json (held-out perplexity, greedy samples) and
config.json; standard library only, so it also runs where torch is absent.
"""

import json
import os
import sys


def _load(folder, name):
    path = os.path.join(folder, name)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"make_card.py: error: cannot read {path}: {e}")


def render(stats, ref, config):
    m, t, tr, h = stats["model"], stats["tokenizer"], stats["training"], ref["heldout"]
    corpus = stats.get("corpus", {})
    n_full = sum(1 for x in m["layer_types"] if x == "full_attention")
    lines = [
        "# hyla-demo",
        "",
        "Hyla's embedded demo model: a small Qwen3.5 (`qwen3_5_text`, Hugging Face "
        "`Qwen3_5ForCausalLM`) trained from scratch on public-domain English, with its own byte-level "
        "BPE tokenizer. It exists so that `hyla generate \"text\"` shows real text on any machine; it "
        "knows little and makes things up. Made by `tools/demo/train.py`"
        + (" (SMOKE RUN: not a usable model)" if tr.get("smoke") else "") + ".",
        "",
        "## Model",
        "",
        "| | |",
        "|---|---|",
        f"| parameters | {m['parameters']:,} ({m['weights_bytes'] / 1e6:.1f} MB of {m['dtype']} weights) |",
        f"| layers | {len(m['layer_types'])}: {len(m['layer_types']) - n_full} Gated DeltaNet, {n_full} full "
        "attention (every 4th layer) |",
        f"| hidden / MLP | {m['hidden_size']} / {m['intermediate_size']} (dense SwiGLU) |",
        f"| GDN heads | {config.get('linear_num_key_heads')} key x {config.get('linear_key_head_dim')}, "
        f"{config.get('linear_num_value_heads')} value x {config.get('linear_value_head_dim')} |",
        f"| attention heads | {config.get('num_attention_heads')} query, {config.get('num_key_value_heads')} key/value, "
        f"head dim {config.get('head_dim')}, partial RoPE |",
        f"| embeddings | tied; vocabulary {m['vocab_size']} |",
        f"| tokenizer | {t['type']}, {t['vocab_size']} tokens, `{t['eos_token']}` = {t['eos_token_id']} ends "
        f"every document; {t['bytes_per_token_train']:.2f} bytes per token on the training text |",
        "",
        "## Data",
        "",
    ]
    for package, licence in sorted(corpus.get("packages", {}).items()):
        lines.append(f"- npm `{package}`: {licence}.")
    files = corpus.get("files", {})
    if files:
        tr_f, ho_f = files.get("train", {}), files.get("heldout", {})
        lines += [
            "",
            f"{corpus.get('documents', '?')} documents after cleaning (tools/demo/prepare_corpus.py): "
            f"training {tr_f.get('documents')} documents / {tr_f.get('bytes', 0) / 1e6:.1f} MB, held out "
            f"{ho_f.get('documents')} whole documents / {ho_f.get('bytes', 0) / 1e6:.2f} MB. "
            f"Left out: {', '.join(corpus.get('skipped', [])) or 'nothing'}. "
            "`bash tools/demo/fetch_corpus.sh DIR` fetches and prepares the same text again.",
        ]
    lines += [
        "",
        "## Training",
        "",
        f"- {tr['steps']:,} steps of {tr['batch']} x {tr['seq_len']} tokens: {tr['tokens_seen'] / 1e6:.0f} M tokens "
        f"({tr['epochs']:.1f} passes over {tr['train_tokens'] / 1e6:.2f} M training tokens) in "
        f"{tr['train_seconds']:.0f} s on {stats.get('device', '?')} ({tr['tokens_per_second'] / 1e3:.0f} K tokens/s); "
        f"the whole script took {stats['wall_seconds']['total']:.0f} s.",
        f"- {tr['optimizer']}, peak learning rate {tr['peak_lr']}, weight decay {tr['weight_decay']}, "
        f"{tr['schedule']}; {tr['precision']}; Gated DeltaNet ops: {tr['gdn_kernels']}.",
        f"- The checkpoint kept is the one with the lowest loss on {tr['val_documents']} validation documents "
        f"taken out of the training text (step {tr['best_step']}, loss {tr['best_val_loss']:.3f}).",
        "- Versions: " + ", ".join(f"{k} {v}" for k, v in stats.get("versions", {}).items() if v) + ".",
        "",
        "## Held-out perplexity",
        "",
        f"On the {h['documents']} held-out documents ({h['tokens_scored']:,} tokens, windows of {h['window']}): "
        f"loss {h['loss']:.3f} nats/token, **perplexity {h['perplexity']:.1f}**, {h['bits_per_byte']:.3f} bits per "
        f"byte ({h['precision']}).",
        "",
        "## Samples and parity",
        "",
        f"Greedy, {ref['max_new_tokens']} new tokens, as computed by transformers {ref['transformers']} "
        "(reference.json); `tests/runtime/demo_model_test.cpp` checks that Hyla generates the same tokens.",
        "",
    ]
    for p in ref["prompts"]:
        text = (p["text"] + p["continuation"]).replace("\n", " / ")
        lines.append(f"- **{p['text']}**{text[len(p['text']):]}")
    lines += [
        "",
        "## Limits",
        "",
        "Tiny and trained for minutes: grammatical-looking English with little sense, old-fashioned "
        "vocabulary (nineteenth-century books, the King James Bible, presidential addresses), no "
        "instruction following, no chat template. Not for any use beyond demonstrating the engine.",
        "",
    ]
    return "\n".join(lines)


def write_card(folder):
    stats = _load(folder, "stats.json")
    ref = _load(folder, "reference.json")
    config = _load(folder, "config.json")
    path = os.path.join(folder, "MODEL_CARD.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(stats, ref, config))
    return path


def main():
    if len(sys.argv) != 2:
        print("usage: tools/demo/make_card.py MODEL_DIR", file=sys.stderr)
        return 2
    print(f"make_card.py: wrote {write_card(sys.argv[1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
