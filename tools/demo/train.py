#!/usr/bin/env python3
"""Trains Hyla's embedded demo model: a small Qwen3.5 (qwen3_5_text) with its own byte-level BPE.

Runs where torch, transformers (5.x) and tokenizers are installed (the project's H200 machine);
no network. The corpus comes from tools/demo/fetch_corpus.sh (run on a machine with npm):

    python3 tools/demo/train.py --corpus DIR --out OUT [--seconds 300] [--smoke]

Steps, each logged; any failure prints "train.py: error: ..." and exits 1:
  1. tokenizer: byte-level BPE (HF tokenizers) trained on train.txt, with Qwen3's tokenizer.json
     structure exactly (NFC normalizer; Split by Qwen's regex + ByteLevel pre-tokenizer; ByteLevel
     decoder and post-processor) and one special token, <|endoftext|> (eos, ends every document).
  2. model: Qwen3_5ForCausalLM from a Qwen3_5TextConfig: Gated DeltaNet layers with full attention
     every 4th layer, dense SwiGLU MLP, tied embeddings; refuses to go past 30 MB of bf16 weights.
  3. training: random windows of --seq-len tokens from the concatenated training documents, bf16
     autocast, AdamW, linear warm-up then cosine decay over the run's progress (the larger of
     elapsed/--seconds and tokens/(--max-epochs x corpus)); validation documents (every 40th
     training document, from the 20th) pick the best checkpoint. fla's kernels are used when fla
     imports (fast); otherwise transformers' torch fallback runs.
  4. saving: save_pretrained in bf16 (config.json, generation_config.json, model.safetensors),
     tokenizer.json and tokenizer_config.json.
  5. reference (a fresh python process with fla and causal_conv1d blocked, so transformers' own
     torch code runs): the saved bf16 weights loaded back as float32 (TF32 off), eager attention;
     held-out loss / perplexity / bits per byte; greedy continuations of PROMPTS with the cache
     (prefill + one token per step, like Hyla), each checked against a no-cache forward, with the
     top1-top2 logit gap of every step. Written to reference.json; Hyla's parity test
     (tests/runtime/demo_model_test.cpp) must reproduce its tokens exactly.
  6. stats.json (parameters, tokens seen, wall times, losses, GPU, versions, corpus) and
     MODEL_CARD.md (tools/demo/make_card.py).

Then copy OUT/{config.json,generation_config.json,model.safetensors,tokenizer.json,
tokenizer_config.json,reference.json,stats.json,MODEL_CARD.md} to models/hyla-demo/.
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("USE_HUB_KERNELS", "NO")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

import argparse
import json
import math
import platform
import subprocess
import sys
import time
import traceback

DOC_SEPARATOR = "<|endoftext|>"  # the line between documents in train.txt / heldout.txt
EOS = "<|endoftext|>"
# Qwen2/Qwen3's pre-tokenizer regex, as in their tokenizer.json (Hyla's tokenizer is tested on it).
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
MAX_WEIGHT_BYTES = 30_000_000  # the limit on the shipped bf16 weights

# Prompts of the parity reference (and of the model card's samples).
PROMPTS = [
    "It was a bright cold morning, and",
    "The ship sailed out of the harbour",
    "Alice looked at the little door and said",
    "Fellow-Citizens of the Senate and House of Representatives:",
    "In the beginning",
]

# Model and training sizes. "full" is the shipped model; "smoke" checks the whole script in ~30 s.
SIZES = {
    "full": dict(vocab=8192, hidden=320, intermediate=768, layers=8, attn_heads=4, kv_heads=2,
                 head_dim=64, lin_k_heads=4, lin_v_heads=8, lin_head_dim=64,
                 seq_len=512, batch=64, lr=2e-3, gen_tokens=32, eval_every_s=20.0),
    "smoke": dict(vocab=1024, hidden=64, intermediate=128, layers=4, attn_heads=2, kv_heads=1,
                  head_dim=32, lin_k_heads=2, lin_v_heads=4, lin_head_dim=16,
                  seq_len=128, batch=8, lr=3e-3, gen_tokens=8, eval_every_s=5.0),
}


def log(msg=""):
    print(msg, flush=True)


class Failure(Exception):
    """A failure with a message meant for the person running the script."""


# ----------------------------------------------------------------------------- corpus
def read_documents(path, limit_bytes=None):
    """A corpus file -> its documents (strings), in order."""
    if not os.path.isfile(path):
        raise Failure(f"{path} is missing: run tools/demo/fetch_corpus.sh DIR here and carry DIR over")
    with open(path, encoding="utf-8") as f:
        text = f.read(limit_bytes) if limit_bytes else f.read()
    docs = [d.strip("\n") for d in text.split("\n" + DOC_SEPARATOR + "\n")]
    docs = [d for d in docs if d]
    if not docs:
        raise Failure(f"{path} holds no document")
    return docs


def load_corpus(corpus_dir, smoke):
    limit = 2_000_000 if smoke else None  # the smoke run reads the first 2 MB
    train = read_documents(os.path.join(corpus_dir, "train.txt"), limit)
    heldout = read_documents(os.path.join(corpus_dir, "heldout.txt"), limit)
    # Validation for checkpoint selection: whole training documents, never trained on.
    val_index = {i for i in range(len(train)) if i % 40 == 20} or {len(train) - 1}
    if len(val_index) >= len(train):
        raise Failure(f"{corpus_dir}/train.txt has too few documents ({len(train)})")
    manifest = {}
    try:
        with open(os.path.join(corpus_dir, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        log(f"  warning: no readable manifest.json in {corpus_dir} ({e}); the card will lack the sources")
    return {
        "train": [d for i, d in enumerate(train) if i not in val_index],
        "val": [d for i, d in enumerate(train) if i in val_index],
        "heldout": heldout,
        "manifest": manifest,
    }


# ----------------------------------------------------------------------------- tokenizer
def train_tokenizer(docs, vocab_size, out_dir):
    """Byte-level BPE with Qwen3's tokenizer.json structure; writes tokenizer.json + _config."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte has a token
        show_progress=False,
    )
    tok.train_from_iterator(docs, trainer=trainer)

    # Serialise, then pin the fields the Rust defaults may spell differently, so the file has
    # exactly Qwen3's structure (Hyla's loader accepts only what it was tested on).
    spec = json.loads(tok.to_str())
    spec["normalizer"] = {"type": "NFC"}
    spec["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN_SPLIT}, "behavior": "Isolated", "invert": False},
        dict(BYTE_LEVEL),
    ]}
    spec["post_processor"] = dict(BYTE_LEVEL)
    spec["decoder"] = dict(BYTE_LEVEL)
    # Only keys this tokenizers version writes (an unknown key could break loading).
    for key, value in {"dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                       "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                       "ignore_merges": False}.items():
        if key in spec["model"]:
            spec["model"][key] = value
    added = spec.get("added_tokens") or []
    if len(added) != 1 or added[0]["content"] != EOS:
        raise Failure(f"tokenizer: expected one added token {EOS}, got {added}")
    added[0].update({"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True})
    path = os.path.join(out_dir, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(spec, f, ensure_ascii=False, indent=1)
    tok = Tokenizer.from_file(path)  # what ships is what the rest of the script uses

    eos_id = tok.token_to_id(EOS)
    for sample in ("Hello, world! It's 1851.\n\nCall me Ishmael.", "naïve café — “quotes”"):
        ids = tok.encode(sample).ids
        if eos_id in ids:
            raise Failure(f"tokenizer: {EOS} appears inside encoded text")
        if tok.decode(ids, skip_special_tokens=False) != sample:
            raise Failure(f"tokenizer: decode(encode(x)) != x for {sample!r}")

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": EOS,
        "pad_token": EOS,
        "unk_token": None,
        "add_bos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,
        "errors": "replace",
        "split_special_tokens": False,
        "model_max_length": 4096,
        "added_tokens_decoder": {str(eos_id): {"content": EOS, "lstrip": False, "normalized": False,
                                               "rstrip": False, "single_word": False, "special": True}},
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=1)
    return tok, eos_id


def check_tokenizer_with_transformers(out_dir, tok):
    """AutoTokenizer must load the folder and agree with the tokenizers library (non-fatal)."""
    try:
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(out_dir, local_files_only=True)
        for p in PROMPTS:
            got = hf(p, add_special_tokens=False)["input_ids"]
            if list(got) != tok.encode(p).ids:
                return f"AutoTokenizer encodes {p!r} differently: {got} vs {tok.encode(p).ids}"
        return "ok"
    except Exception as e:  # the checkpoint is still usable by Hyla and the tokenizers library
        return f"AutoTokenizer failed: {type(e).__name__}: {e}"


def encode_stream(tok, docs, eos_id):
    """Documents -> one int32 tensor: each document's ids followed by eos."""
    import torch

    ids = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(eos_id)
    return torch.tensor(ids, dtype=torch.int32)


# ----------------------------------------------------------------------------- model
def resolve(name, submodule):
    """A transformers class by name: the top-level export, else its module under models/qwen3_5."""
    import importlib

    import transformers

    obj = getattr(transformers, name, None)
    if obj is None:
        try:
            obj = getattr(importlib.import_module(f"transformers.models.qwen3_5.{submodule}"), name, None)
        except Exception as e:
            raise Failure(f"transformers {transformers.__version__} has no {name} ({e}); transformers 5.x is needed")
    if obj is None:
        raise Failure(f"transformers {transformers.__version__} has no {name}; transformers 5.x is needed")
    return obj


def build_config(s, vocab_size, eos_id):
    Qwen3_5TextConfig = resolve("Qwen3_5TextConfig", "configuration_qwen3_5")

    rotary = int(s["head_dim"] * 0.25) // 2  # frequencies of the partial RoPE
    layer_types = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(s["layers"])]
    base = dict(
        vocab_size=vocab_size,
        hidden_size=s["hidden"],
        intermediate_size=s["intermediate"],
        num_hidden_layers=s["layers"],
        num_attention_heads=s["attn_heads"],
        num_key_value_heads=s["kv_heads"],
        head_dim=s["head_dim"],
        hidden_act="silu",
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        attention_bias=False,
        attention_dropout=0.0,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=s["lin_head_dim"],
        linear_value_head_dim=s["lin_head_dim"],
        linear_num_key_heads=s["lin_k_heads"],
        linear_num_value_heads=s["lin_v_heads"],
        layer_types=layer_types,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        use_cache=True,
    )
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
    # The text model ignores the multimodal sections (all three position rows are equal for text);
    # they must still sum to the number of rotary frequencies.
    mrope = dict(rope, mrope_section=[rotary - 2 * (rotary // 4), rotary // 4, rotary // 4], mrope_interleaved=True)
    errors = []
    for label, kw in (("rope_parameters+mrope", {**base, "rope_parameters": mrope}),
                      ("rope_parameters", {**base, "rope_parameters": rope})):
        try:
            cfg = Qwen3_5TextConfig(**kw)
            if list(cfg.layer_types) != layer_types:
                raise ValueError(f"layer_types became {cfg.layer_types}")
            return cfg, label
        except Exception as e:
            errors.append(f"[{label}] {type(e).__name__}: {e}")
    raise Failure("Qwen3_5TextConfig refused the config: " + " | ".join(errors))


def build_model(cfg, attn):
    import torch

    Qwen3_5ForCausalLM = resolve("Qwen3_5ForCausalLM", "modeling_qwen3_5")

    try:
        model = Qwen3_5ForCausalLM._from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    except TypeError:
        model = Qwen3_5ForCausalLM(cfg)
    if cfg.model_type not in ("qwen3_5_text", "qwen3_5"):
        raise Failure(f"model_type is {cfg.model_type}; Hyla loads qwen3_5_text / qwen3_5")
    lm, emb = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    if lm.data_ptr() != emb.data_ptr():
        model.tie_weights()
        if model.get_output_embeddings().weight.data_ptr() != emb.data_ptr():
            raise Failure("tie_word_embeddings=True but lm_head is not tied to the embedding")
    return model.float()


def check_model_shape(model, s):
    layers = model.model.layers
    if len(layers) != s["layers"]:
        raise Failure(f"{len(layers)} layers, expected {s['layers']}")
    for i, layer in enumerate(layers):
        full = (i + 1) % 4 == 0
        if full != hasattr(layer, "self_attn") or full == hasattr(layer, "linear_attn"):
            raise Failure(f"layer {i}: expected {'full attention' if full else 'Gated DeltaNet'}")
        if hasattr(layer.mlp, "experts"):
            raise Failure(f"layer {i}: expected a dense MLP, found experts")


def drop_tied_lm_head(path):
    """With tied embeddings the checkpoint needs no lm_head.weight (transformers ties it at load,
    Hyla reuses the embedding); some versions still write it, so it is dropped to keep the size."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(path, framework="pt") as f:
        keys, metadata = list(f.keys()), f.metadata() or {"format": "pt"}
        if "lm_head.weight" not in keys:
            return
        tensors = {k: f.get_tensor(k) for k in keys if k != "lm_head.weight"}
    save_file(tensors, path, metadata=metadata)
    log("  dropped the tied lm_head.weight from model.safetensors")


def count_params(model):
    return sum(p.numel() for p in model.parameters())  # tied weights counted once


def kernels_in_use():
    """Which implementation of the GDN ops transformers picked at import ('fla' or 'torch')."""
    try:
        from transformers.models.qwen3_5 import modeling_qwen3_5 as m

        fn = getattr(m, "torch_chunk_gated_delta_rule", None)
        mod = getattr(fn, "__module__", "") or ""
        return "fla" if mod.startswith("fla") else f"torch ({mod or 'unknown'})"
    except Exception as e:
        return f"unknown ({e})"


# ----------------------------------------------------------------------------- training
def windows(stream, seq_len):
    """Non-overlapping [n, seq_len + 1] windows covering the stream (the tail dropped)."""
    n = (len(stream) - 1) // seq_len
    if n < 1:
        raise Failure(f"a split of {len(stream)} tokens is shorter than one window of {seq_len + 1}")
    idx = [i * seq_len for i in range(n)]
    import torch

    return torch.stack([stream[i:i + seq_len + 1] for i in idx])


def mean_loss(model, wins, batch, device, autocast):
    """Mean next-token loss (nats) over every window; also the token count."""
    import torch
    import torch.nn.functional as F

    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for b in range(0, len(wins), batch):
            x = wins[b:b + batch].to(device=device, dtype=torch.long)
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=autocast):
                logits = model(input_ids=x[:, :-1], use_cache=False).logits
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
            total += float(loss)
            count += x[:, 1:].numel()
    model.train()
    return total / count, count


def train(model, data, s, args, device):
    import torch
    import torch.nn.functional as F

    stream = data["train_ids"]
    val_wins = windows(data["val_ids"], s["seq_len"])
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]  # norms, A_log, dt_bias
    opt_kw = dict(lr=s["lr"], betas=(0.9, 0.95), eps=1e-8)
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, fused=device.type == "cuda", **opt_kw)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(groups, **opt_kw)

    tokens_per_step = s["batch"] * s["seq_len"]
    max_tokens = args.max_epochs * len(stream)
    gen = torch.Generator().manual_seed(args.seed)
    warmup = 0.03
    best = {"val_loss": float("inf"), "step": 0, "state": None}
    history = []
    step, tokens, last_eval, train_loss = 0, 0, 0.0, float("nan")
    model.train()
    t0 = time.time()
    while True:
        elapsed = time.time() - t0
        progress = max(elapsed / args.seconds, tokens / max_tokens)
        if progress >= 1.0:
            break
        # linear warm-up, then cosine from lr to lr/10
        if progress < warmup:
            lr = s["lr"] * max(progress / warmup, 0.01)
        else:
            q = (progress - warmup) / (1 - warmup)
            lr = s["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * q)))
        for g in opt.param_groups:
            g["lr"] = lr

        starts = torch.randint(0, len(stream) - s["seq_len"] - 1, (s["batch"],), generator=gen)
        x = torch.stack([stream[i:i + s["seq_len"] + 1] for i in starts.tolist()])
        x = x.to(device=device, dtype=torch.long, non_blocking=True)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = model(input_ids=x[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        opt.step()
        step += 1
        tokens += tokens_per_step
        if not math.isfinite(grad_norm):
            raise Failure(f"step {step}: gradient norm {grad_norm}: training diverged (try a lower --lr)")

        if step % 50 == 0 or time.time() - last_eval >= s["eval_every_s"]:
            train_loss = float(loss)
        if time.time() - last_eval >= s["eval_every_s"]:
            last_eval = time.time()
            val_loss, _ = mean_loss(model, val_wins, s["batch"], device, device.type == "cuda")
            history.append({"step": step, "seconds": round(time.time() - t0, 1), "tokens": tokens,
                            "lr": lr, "train_loss": train_loss, "val_loss": val_loss})
            mark = ""
            if val_loss < best["val_loss"]:
                best = {"val_loss": val_loss, "step": step, "tokens": tokens,
                        "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
                mark = " (best)"
            log(f"  step {step:6d}  {time.time() - t0:6.1f} s  {tokens / 1e6:7.1f} M tokens  "
                f"epoch {tokens / len(stream):5.2f}  lr {lr:.2e}  train {train_loss:.3f}  val {val_loss:.3f}{mark}")
    wall = time.time() - t0
    if device.type == "cuda":
        torch.cuda.synchronize()
    val_loss, _ = mean_loss(model, val_wins, s["batch"], device, device.type == "cuda")
    history.append({"step": step, "seconds": round(wall, 1), "tokens": tokens, "lr": 0.0,
                    "train_loss": float(loss), "val_loss": val_loss})
    if val_loss < best["val_loss"]:
        best = {"val_loss": val_loss, "step": step, "tokens": tokens, "state": None}
    if best["state"] is not None:
        model.load_state_dict(best["state"])
    log(f"  trained {step} steps, {tokens / 1e6:.1f} M tokens ({tokens / len(stream):.2f} epochs) in {wall:.1f} s; "
        f"kept step {best['step']} (validation loss {best['val_loss']:.4f})")
    return {"steps": step, "tokens_seen": tokens, "epochs": tokens / len(stream), "train_seconds": wall,
            "tokens_per_second": tokens / wall if wall > 0 else 0.0, "best_step": best["step"],
            "best_val_loss": best["val_loss"], "final_train_loss": float(loss), "history": history}


# ----------------------------------------------------------------------------- reference
def block_optional_kernels():
    """Makes fla / causal_conv1d / kernels unimportable in this process, so transformers falls back
    to its own torch code (it picks the implementation at import time; find_spec -> None)."""
    for name in ("fla", "causal_conv1d", "kernels", "mamba_ssm"):
        sys.modules[name] = None


def greedy(model, ids, n, device):
    """Greedy continuation with the cache, as Hyla's engine runs it: prefill, then one token a step.
    Returns (tokens, top1-top2 logit gap of each step)."""
    import torch

    x = torch.tensor([ids], device=device)
    out = model(input_ids=x, use_cache=True)
    cache = out.past_key_values
    if cache is None:  # a transformers that does not make the cache itself
        from transformers import DynamicCache

        cache = DynamicCache(config=model.config)
        out = model(input_ids=x, past_key_values=cache, use_cache=True)
        cache = out.past_key_values if out.past_key_values is not None else cache
    logits = out.logits[0, -1].float()
    tokens, gaps = [], []
    for i in range(n):
        top = torch.topk(logits, 2).values
        gaps.append(float(top[0] - top[1]))
        t = int(torch.argmax(logits))
        tokens.append(t)
        if i + 1 < n:
            out = model(input_ids=torch.tensor([[t]], device=device), past_key_values=cache, use_cache=True)
            cache = out.past_key_values if out.past_key_values is not None else cache
            logits = out.logits[0, -1].float()
    return tokens, gaps


def run_reference(args):
    """Step 5, in its own process: the saved checkpoint, float32, transformers' torch code."""
    block_optional_kernels()
    import torch
    from tokenizers import Tokenizer

    Qwen3_5ForCausalLM = resolve("Qwen3_5ForCausalLM", "modeling_qwen3_5")
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    s = SIZES["smoke" if args.smoke else "full"]
    out = args.out
    tok = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    eos_id = tok.token_to_id(EOS)
    try:
        model = Qwen3_5ForCausalLM.from_pretrained(out, dtype=torch.float32, attn_implementation="eager",
                                                   local_files_only=True)
    except TypeError:
        model = Qwen3_5ForCausalLM.from_pretrained(out, torch_dtype=torch.float32, attn_implementation="eager",
                                                   local_files_only=True)
    kernels = kernels_in_use()
    if kernels == "fla":
        raise Failure("the reference process still uses fla; it must use transformers' torch code")
    model.eval()

    # Held-out perplexity on every whole held-out document (the GPU when there is one: same math).
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    docs = read_documents(os.path.join(args.corpus, "heldout.txt"), 2_000_000 if args.smoke else None)
    stream = encode_stream(tok, docs, eos_id)
    wins = windows(stream, s["seq_len"])
    loss, count = mean_loss(model, wins, 16, device, autocast=False)
    # bits per byte: the scored tokens' UTF-8 bytes (eos counted as none), a tokenizer-free measure
    scored_bytes = sum(len(tok.decode(w[1:].tolist(), skip_special_tokens=True).encode("utf-8")) for w in wins)
    heldout = {"documents": len(docs), "tokens_scored": count, "bytes_scored": scored_bytes,
               "loss": loss, "perplexity": math.exp(loss),
               "bits_per_byte": loss * count / math.log(2) / scored_bytes, "window": s["seq_len"],
               "precision": "float32 from the bf16 weights, no TF32", "device": str(device)}
    log(f"  held-out: {count} tokens, loss {loss:.4f}, perplexity {math.exp(loss):.2f}, "
        f"{heldout['bits_per_byte']:.3f} bits/byte")

    # Greedy continuations on the CPU: exact float32, as Hyla computes them.
    model.to("cpu")
    prompts = []
    with torch.no_grad():
        for text in PROMPTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            tokens, gaps = greedy(model, ids, s["gen_tokens"], "cpu")
            # Cross-check: one no-cache forward over prompt + continuation picks the same tokens
            # (chunked vs recurrent delta rule), except perhaps at a near tie.
            full = model(input_ids=torch.tensor([ids + tokens[:-1]]), use_cache=False).logits[0, len(ids) - 1:]
            nocache = full.argmax(-1).tolist()
            bad = [t for t in range(len(tokens)) if nocache[t] != tokens[t] and gaps[t] >= 1e-3]
            if bad:
                raise Failure(f"prompt {text!r}: cached greedy {tokens} != no-cache argmax {nocache} at steps {bad}")
            prompts.append({"text": text, "prompt_ids": ids, "tokens": tokens,
                            "continuation": tok.decode(tokens, skip_special_tokens=False),
                            "top1_top2_gaps": [round(g, 6) for g in gaps], "min_gap": min(gaps)})
            log(f"  {text!r} -> {prompts[-1]['continuation']!r} (min gap {min(gaps):.4f})")
    ref = {
        "what": "greedy continuations of transformers' Qwen3_5ForCausalLM (torch code, no fla) from "
                "the saved bf16 weights loaded as float32, eager attention, TF32 off, on the CPU; "
                "prefill then one token per step with the cache; no stop token",
        "transformers": __import__("transformers").__version__,
        "torch": torch.__version__,
        "gdn_kernels": kernels,
        "eos_token_id": eos_id,
        "max_new_tokens": s["gen_tokens"],
        "prompts": prompts,
        "heldout": heldout,
    }
    with open(os.path.join(out, "reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, indent=1, ensure_ascii=False)
    return 0


# ----------------------------------------------------------------------------- main
def versions():
    v = {"python": platform.python_version()}
    for name in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            v[name] = __import__(name).__version__
        except Exception:
            v[name] = None
    return v


def check_packages():
    """torch, transformers 5.x, tokenizers and safetensors must import; say which one does not."""
    missing = []
    for name in ("torch", "transformers", "tokenizers", "safetensors"):
        try:
            __import__(name)
        except Exception as e:
            missing.append(f"{name} ({type(e).__name__}: {e})")
    if missing:
        raise Failure("cannot import " + ", ".join(missing) + ": run this where torch, transformers 5.x "
                      "and tokenizers are installed (the project's GPU machine)")
    import transformers

    if int(transformers.__version__.split(".")[0]) < 5:
        raise Failure(f"transformers {transformers.__version__}: Qwen3_5ForCausalLM needs transformers 5.x")


def run_training(args):
    t_start = time.time()
    check_packages()
    import torch

    s = dict(SIZES["smoke" if args.smoke else "full"])
    for key in ("lr", "batch", "seq_len"):
        if getattr(args, key) is not None:
            s[key] = getattr(args, key)
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type != "cuda" and not args.smoke:
        log("  warning: no CUDA device: training on the CPU will be slow (use --smoke to test the script)")
    ver = versions()
    log(f"python {ver['python']}  torch {ver['torch']}  transformers {ver['transformers']}  "
        f"tokenizers {ver['tokenizers']}  device {device}"
        + (f" ({torch.cuda.get_device_name(0)})" if device.type == "cuda" else ""))

    log("1. corpus and tokenizer")
    data = load_corpus(args.corpus, args.smoke)
    t = time.time()
    tok, eos_id = train_tokenizer(data["train"], s["vocab"], args.out)
    tokenizer_seconds = time.time() - t
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    for split in ("train", "val", "heldout"):
        data[f"{split}_ids"] = encode_stream(tok, data[split], eos_id)
    train_bytes = sum(len(d.encode("utf-8")) for d in data["train"])
    log(f"  vocabulary {vocab_size} (eos {EOS} = {eos_id}) in {tokenizer_seconds:.1f} s; "
        f"train {len(data['train'])} docs / {len(data['train_ids']) / 1e6:.2f} M tokens "
        f"({train_bytes / len(data['train_ids']):.2f} bytes/token), validation {len(data['val'])} docs / "
        f"{len(data['val_ids'])} tokens, held out {len(data['heldout'])} docs / {len(data['heldout_ids'])} tokens")

    log("2. model")
    cfg, cfg_label = build_config(s, vocab_size, eos_id)
    model = build_model(cfg, "sdpa")
    check_model_shape(model, s)
    n_params = count_params(model)
    if 2 * n_params > MAX_WEIGHT_BYTES:
        raise Failure(f"{n_params:,} parameters = {2 * n_params / 1e6:.1f} MB of bf16, over {MAX_WEIGHT_BYTES / 1e6:.0f} MB")
    kernels = kernels_in_use()
    log(f"  Qwen3_5ForCausalLM ({cfg.model_type}, config via {cfg_label}): {n_params:,} parameters "
        f"({2 * n_params / 1e6:.1f} MB bf16), layers {cfg.layer_types}, GDN ops: {kernels}")
    model.to(device)

    log(f"3. training for {args.seconds:.0f} s (at most {args.max_epochs} epochs)")
    result = train(model, data, s, args, device)

    log("4. saving (bf16)")
    model.to("cpu").to(torch.bfloat16)
    model.config.use_cache = True
    try:
        model.save_pretrained(args.out, safe_serialization=True)
    except TypeError:
        model.save_pretrained(args.out)
    weights = os.path.join(args.out, "model.safetensors")
    if not os.path.isfile(weights):
        raise Failure(f"save_pretrained wrote no {weights} (files: {sorted(os.listdir(args.out))})")
    drop_tied_lm_head(weights)
    size = os.path.getsize(weights)
    log(f"  model.safetensors: {size / 1e6:.2f} MB")
    if size > MAX_WEIGHT_BYTES + 1_000_000:
        raise Failure(f"model.safetensors is {size / 1e6:.1f} MB, over the {MAX_WEIGHT_BYTES / 1e6:.0f} MB limit")
    hf_tokenizer = check_tokenizer_with_transformers(args.out, tok)
    log(f"  AutoTokenizer check: {hf_tokenizer}")

    log("5. reference (a fresh process, transformers' torch code, float32)")
    cmd = [sys.executable, os.path.abspath(__file__), "--reference-only", "--corpus", args.corpus, "--out", args.out]
    if args.smoke:
        cmd.append("--smoke")
    t = time.time()
    rc = subprocess.call(cmd)
    if rc != 0:
        raise Failure(f"the reference step failed (exit {rc}); see its output above")
    reference_seconds = time.time() - t
    with open(os.path.join(args.out, "reference.json"), encoding="utf-8") as f:
        ref = json.load(f)

    log("6. stats.json and MODEL_CARD.md")
    manifest = data["manifest"]
    stats = {
        "model": {"architecture": "Qwen3_5ForCausalLM", "model_type": cfg.model_type, "parameters": n_params,
                  "weights_bytes": size, "dtype": "bfloat16", "layer_types": list(cfg.layer_types),
                  "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
                  "vocab_size": vocab_size, "tie_word_embeddings": True},
        "tokenizer": {"type": "byte-level BPE (Qwen3 tokenizer.json structure)", "vocab_size": vocab_size,
                      "eos_token": EOS, "eos_token_id": eos_id, "train_seconds": round(tokenizer_seconds, 1),
                      "bytes_per_token_train": train_bytes / len(data["train_ids"]),
                      "transformers_autotokenizer": hf_tokenizer},
        "training": {k: v for k, v in result.items() if k != "history"} | {
            "seq_len": s["seq_len"], "batch": s["batch"], "peak_lr": s["lr"], "weight_decay": 0.1,
            "optimizer": "AdamW (0.9, 0.95), grad clip 1.0", "schedule": "3% linear warm-up, cosine to 10%",
            "precision": "bf16 autocast, fp32 master weights", "gdn_kernels": kernels, "seed": args.seed,
            "seconds_budget": args.seconds, "max_epochs": args.max_epochs, "smoke": bool(args.smoke),
            "train_tokens": len(data["train_ids"]), "val_tokens": len(data["val_ids"]),
            "val_documents": len(data["val"])},
        "history": result["history"],
        "heldout": ref["heldout"],
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else platform.processor() or "cpu",
        "versions": ver,
        "corpus": {"packages": manifest.get("packages", {}), "files": manifest.get("files", {}),
                   "documents": len(manifest.get("documents", [])), "skipped": manifest.get("skipped", [])},
        "wall_seconds": {"total": round(time.time() - t_start, 1), "train": round(result["train_seconds"], 1),
                         "reference": round(reference_seconds, 1)},
    }
    with open(os.path.join(args.out, "stats.json"), "w", encoding="utf-8") as f:
        json.dump(stats, f, indent=1)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_card

    make_card.write_card(args.out)
    log(f"done in {time.time() - t_start:.0f} s -> {args.out}: "
        f"{', '.join(sorted(f for f in os.listdir(args.out) if not f.startswith('.')))}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", required=True, help="folder with train.txt, heldout.txt, manifest.json")
    ap.add_argument("--out", required=True, help="output folder (the model folder)")
    ap.add_argument("--seconds", type=float, default=None, help="training wall-clock budget (default 300; smoke 15)")
    ap.add_argument("--max-epochs", type=float, default=30.0, help="stop after this many passes over the data")
    ap.add_argument("--smoke", action="store_true", help="tiny model and corpus slice: checks the script in ~30 s")
    ap.add_argument("--lr", type=float, default=None, help="peak learning rate")
    ap.add_argument("--batch", type=int, default=None, help="sequences per step")
    ap.add_argument("--seq-len", type=int, default=None, help="tokens per sequence")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--reference-only", action="store_true", help=argparse.SUPPRESS)  # step 5's process
    args = ap.parse_args()
    if args.seconds is None:
        args.seconds = 15.0 if args.smoke else 300.0
    try:
        return run_reference(args) if args.reference_only else run_training(args)
    except Failure as e:
        print(f"train.py: error: {e}", file=sys.stderr, flush=True)
        return 1
    except Exception as e:
        traceback.print_exc()
        print(f"train.py: error: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
