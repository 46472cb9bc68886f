// The `hyla` command. Subcommands: selfcheck (CPU check + short benchmark of the delta-rule core),
// inspect (a checkpoint's tensors per layer and role), generate (a prompt text in, text streamed
// out, by default on the embedded demo model; or token ids in, ids out; through the runtime
// engine), bench (the engine's prefill and decode speed in llama-bench's cases), tokenize /
// detokenize (text <-> ids through a tokenizer.json; only in builds with PCRE2), template (a chat
// request -> the prompt its chat template renders), serve (the OpenAI-compatible HTTP server; in
// builds with Boost and the tokenizer), chat (a conversation in the terminal, through the chat
// template and the engine; in builds with the tokenizer).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/bench.h"
#include "cli/chat.h"
#include "cli/generate.h"
#include "cli/inspect.h"
#include "cli/selfcheck.h"
#include "cli/serve.h"
#include "cli/speculative.h"
#include "cli/template.h"
#include "core/cpu_features.h"
#include "core/parallel.h"
#ifdef HYLA_WITH_PCRE2
#include "cli/tokenize.h"
#endif

namespace {

/// The linear-attention backend flags of generate and bench (model/linear_backends.h). Their
/// values are checked by the subcommand (exit 2 with the accepted names).
void add_linear_attn_flags(CLI::App* app, hyla::model::LinearAttnBackendFlags& flags) {
  app->add_option("--linear-attn-backend", flags.backend,
                  "linear attention, every phase the name fits: auto (all), fused or ops "
                  "(decode), chunk or recurrent (prefill); the per-phase flags override it");
  app->add_option("--linear-attn-decode-backend", flags.decode,
                  "linear-attention decode: auto (default), fused (one kernel) or ops (separate "
                  "kernels)");
  app->add_option("--linear-attn-prefill-backend", flags.prefill,
                  "linear-attention prefill: auto (default: by device and length), chunk or "
                  "recurrent");
  app->add_option("--linear-attn-verify-backend", flags.verify,
                  "linear-attention speculative verify: auto, fused or ops (default: as decode)");
}

}  // namespace

int main(int argc, char** argv) {
  hyla::choose_blas_kernels(argv);  // may re-execute with OPENBLAS_CORETYPE set (cpu_features.h)
  CLI::App app{"Hyla: inference engine for hybrid linear-attention LLMs"};
  app.set_version_flag("--version", std::string("hyla ") + HYLA_VERSION);
  app.require_subcommand(0, 1);

  hyla::cli::SelfcheckOptions selfcheck;
  CLI::App* sc = app.add_subcommand("selfcheck", "check the CPU delta-rule core and time it");
  sc->add_option("--tokens", selfcheck.bench_tokens, "tokens of the timed prefill")
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 20));
  sc->add_option("--repeats", selfcheck.repeats, "timed repetitions")->check(CLI::Range(1, 100));
  sc->add_option("--threads", selfcheck.threads, "worker threads (0 = all cores)")
      ->check(CLI::Range(0, 1024));
  sc->add_option("--model", selfcheck.model_dir,
                 "model whose decode is timed against the read bound (default: the demo model)");
  sc->add_option("--decode-tokens", selfcheck.decode_tokens, "greedy tokens of that decode")
      ->check(CLI::Range(int64_t{8}, int64_t{1} << 16));

  std::string inspect_path;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "per-layer tensors of a model: roles, shapes, dtypes, parameter counts");
  inspect->add_option("path", inspect_path, "checkpoint folder or config.json")->required();
  hyla::cli::InspectOptions inspect_options;
  inspect->add_option("--tensor-parallel", inspect_options.tensor_parallel,
                      "also plan one rank's memory when the model is split by head over N GPUs: "
                      "state per sequence, KV per token, requests at once");
  inspect->add_option("--budget-mib", inspect_options.budget_mib,
                      "each rank's state + KV memory for that plan (default 1024)");

  hyla::cli::GenerateOptions generate;
  CLI::App* gen = app.add_subcommand(
      "generate",
      "continue a prompt text, streaming text (default model: the embedded demo model), or "
      "generate token ids for prompts of token ids (--prompt-ids), batched");
  gen->add_option("prompt", generate.prompt_text,
                  "the prompt text (needs a build with the tokenizer and DIR/tokenizer.json)");
  gen->add_option("--model", generate.model_dir,
                  "checkpoint folder (config.json + safetensors [+ tokenizer.json]); default: the "
                  "embedded demo model, models/hyla-demo ($HYLA_DEMO_MODEL overrides)");
  gen->add_option("--prompt-ids", generate.prompt_ids,
                  "a prompt as token ids, e.g. \"1 2 3\"; repeat for more prompts")
      ->allow_extra_args(false);
  gen->add_option("--tokenizer", generate.tokenizer_path,
                  "tokenizer.json for a text prompt (default: the model folder's)");
  gen->add_option("--max-new-tokens", generate.max_new_tokens,
                  "tokens to generate per prompt (default 128 for text, 16 for ids)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  gen->add_option("--temperature", generate.temperature,
                  "0 = greedy (default 0.8 for text, 0 for ids)")
      ->check(CLI::Range(0.0f, 100.0f));
  gen->add_option("--top-k", generate.top_k, "keep the k best tokens (0 = off)")
      ->check(CLI::Range(int64_t{0}, int64_t{INT32_MAX}));
  gen->add_option("--top-p", generate.top_p,
                  "nucleus mass, 1 = off (default 0.95 for text, 1 for ids)")
      ->check(CLI::Range(0.0f, 1.0f));
  gen->add_option("--seed", generate.seed, "seed of the sampling draws")
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  gen->add_option("--budget-mib", generate.budget_mib,
                  "memory for state slots + KV pages (default: sized for the prompts)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  gen->add_flag("--ignore-eos", generate.ignore_eos, "text: do not stop at the end-of-text token");
  gen->add_flag("--allow-long-context", generate.allow_long_context,
                "run prompts longer than the model's context limit (max_position_embeddings)");
  gen->add_flag("--json", generate.json,
                "print one JSON object instead of lines of ids or streamed text");
  gen->add_option("--device", generate.device,
                  "where the model runs: cpu, cuda, or auto (default: cuda when a CUDA device is "
                  "visible, else cpu)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  gen->add_option("--prefix-cache", generate.prefix_cache,
                  "reuse the state and KV of earlier requests' common prefixes: on (default) or "
                  "off")
      ->check(CLI::IsMember({"on", "off"}));
  gen->add_option("--prefix-cache-host-mib", generate.prefix_cache_host_mib,
                  "host memory for prefix-cache snapshots that leave the state pool (default 0: "
                  "none; they are dropped)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  gen->add_option("--prefix-cache-device-mib", generate.prefix_cache_device_mib,
                  "device memory, beyond the budget, for int8 prefix-cache snapshots that leave "
                  "the state pool, before the host tier (needs --prefix-cache-int8 on; default 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  gen->add_option("--prefix-cache-int8", generate.prefix_cache_int8,
                  "keep snapshots outside the state pool in int8 (one scale per SSM row, conv "
                  "native; about a quarter of the bytes, error <= max|row|/254): on or off "
                  "(default)")
      ->check(CLI::IsMember({"on", "off"}));
  gen->add_option("--speculative", generate.speculative,
                  "speculative decoding: off (default), ngram (drafts looked up in the prompt "
                  "and the output so far), mtp (the checkpoint's multi-token-prediction head) or "
                  "draft:DIR (greedy drafts of a small model of the same vocabulary); drafts are "
                  "verified by the model, greedy output is unchanged")
      ->check(CLI::Validator(hyla::cli::check_speculative_flag, "off|ngram|mtp|draft:DIR"));
  gen->add_option("--draft-tokens", generate.draft_tokens,
                  "drafts per request and step with --speculative (default 4)")
      ->check(CLI::Range(int64_t{1}, int64_t{16}));  // runtime::kMaxDraftTokens
  gen->add_option("--spec-mode", generate.spec_mode,
                  "how linear layers roll back to the accepted drafts: replay (default; one state "
                  "per request, the accepted steps replayed) or states (a state per draft kept, "
                  "the accepted one installed)")
      ->check(CLI::IsMember({"replay", "states"}));
  gen->add_option("--tensor-parallel", generate.tensor_parallel,
                  "split the model by head over N ranks (on the CPU: N threads of this process, "
                  "the ranks' partial sums added in rank order; on CUDA: one GPU per rank, the "
                  "sums by NCCL); the memory budget is each rank's (default 1: off)");
  gen->add_flag("--sequential", generate.sequential,
                "start each prompt after the previous one has finished (later ones can reuse "
                "earlier ones through the prefix cache)");
  int threads = 0;
  gen->add_option("--threads", threads,
                  "CPU threads (default: $HYLA_NUM_THREADS, else the cores this process may use)")
      ->check(CLI::Range(1, 1024));
  add_linear_attn_flags(gen, generate.linear_attn);
  bool verbose = false;
  gen->add_flag("--verbose", verbose,
                "print the CPU's vector units, the threads and the GEMM kernels to stderr first");

  hyla::cli::BenchOptions bench;
  CLI::App* bn = app.add_subcommand(
      "bench",
      "prefill and decode tokens/s of the engine (llama-bench / llama-batched-bench cases) with "
      "random prompt ids: a markdown table, and JSON with --json");
  bn->add_option("--model", bench.model_dir,
                 "checkpoint folder (default: the embedded demo model, models/hyla-demo)");
  bn->add_option("--device", bench.device, "cpu, cuda, or auto (default: cuda when visible)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  bn->add_option("--prompt", bench.prompt, "prefill cases: prompt tokens (default 512,4096)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  bn->add_option("--depth", bench.depth,
                 "one-sequence decode cases: tokens before the decode (default 0,4096)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  bn->add_option("--batch", bench.batch,
                 "aggregate decode cases: sequences decoding together (default 1,4,16,64)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  bn->add_option("--batch-prompt", bench.batch_prompt,
                 "prompt tokens of each batched sequence (default 512)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  bn->add_option("--new", bench.new_tokens, "generated tokens per sequence (default 128)")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  bn->add_option("--step-tokens", bench.step_tokens,
                 "prompt tokens per step of the prefill cases (default 2048)")
      ->check(CLI::Range(int64_t{64}, int64_t{1} << 20));
  bn->add_option("--json", bench.json_path, "also write the results to this JSON file");
  bn->add_option("--workload", bench.workload,
                 "standard (the cases above), prefix (the prefix cache's workload: shared system "
                 "prompt, multi-turn chats, repeated documents; cache off and on) or speculative "
                 "(decode with n-gram speculation off and on, repetitive and random prompts, "
                 "each --batch)")
      ->check(CLI::IsMember({"standard", "prefix", "speculative"}));
  bn->add_option("--tensor-parallel", bench.tensor_parallel,
                 "split the model by head over N ranks for the standard cases (on CUDA one GPU "
                 "per rank, the sums by NCCL; --profile then shows the all-reduce per step)");
  bn->add_flag("--profile", bench.profile,
               "then run each case again with its time split by layer kind (ms per step; each "
               "layer waits for the device)");
  add_linear_attn_flags(bn, bench.linear_attn);
  int bench_threads = 0;
  bn->add_option("--threads", bench_threads,
                 "CPU threads (default: $HYLA_NUM_THREADS, else the cores this process may use)")
      ->check(CLI::Range(1, 1024));

  std::string template_model;
  CLI::App* tmpl = app.add_subcommand(
      "template",
      "a chat request as one JSON object on stdin ({\"messages\": [...], \"tools\": [...], "
      "\"add_generation_prompt\": true, other keys such as \"enable_thinking\" passed to the "
      "template}) -> the prompt the model's chat template renders, on stdout");
  tmpl->add_option("--model", template_model,
                   "model folder: its chat_template.jinja or tokenizer_config.json's "
                   "chat_template, bos_token, eos_token (default: the embedded demo model, which "
                   "gets a plain 'User: ... / Assistant:' template when it has none)");

  hyla::cli::ServeOptions serve;
  CLI::App* srv = app.add_subcommand(
      "serve",
      "an OpenAI-compatible HTTP server: POST /v1/chat/completions and /v1/completions (streamed "
      "with SSE or not), GET /v1/models, /health, /metrics (Prometheus)");
  srv->add_option("--model", serve.model_dir,
                  "checkpoint folder with tokenizer.json (default: the embedded demo model)");
  srv->add_option("--host", serve.host,
                  "address or host name to listen on (default 127.0.0.1; IPv6 as ::1 or [::1])");
  srv->add_option("--served-model-name", serve.served_model_name,
                  "the model's name in the API: /v1/models and requests' \"model\" (default: the "
                  "model folder's name)");
  srv->add_option_function<std::string>(
         "--prefix-cache", [&serve](const std::string& v) { serve.prefix_cache = v == "on"; },
         "reuse the state and KV of earlier requests' common prefixes: on (default) or off")
      ->check(CLI::IsMember({"on", "off"}));
  srv->add_option("--prefix-cache-host-mib", serve.prefix_cache_host_mib,
                  "host memory for prefix-cache snapshots that leave the state pool (default 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  srv->add_option("--prefix-cache-device-mib", serve.prefix_cache_device_mib,
                  "device memory, beyond the budget, for int8 prefix-cache snapshots that leave "
                  "the state pool (needs --prefix-cache-int8 on; default 0)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30));
  srv->add_option_function<std::string>(
         "--prefix-cache-int8",
         [&serve](const std::string& v) { serve.prefix_cache_int8 = v == "on"; },
         "keep snapshots outside the state pool in int8 (one scale per SSM row): on or off "
         "(default)")
      ->check(CLI::IsMember({"on", "off"}));
  srv->add_option("--speculative", serve.speculative,
                  "speculative decoding: off (default), ngram (drafts from the prompt, the output "
                  "so far and a request's 'prediction'), mtp (the checkpoint's MTP head) or "
                  "draft:DIR (a small model of the same vocabulary); drafts are verified by the "
                  "model")
      ->check(CLI::Validator(hyla::cli::check_speculative_flag, "off|ngram|mtp|draft:DIR"));
  srv->add_option("--draft-tokens", serve.draft_tokens,
                  "drafts per request and step with --speculative (default 4)")
      ->check(CLI::Range(int64_t{1}, int64_t{16}));  // runtime::kMaxDraftTokens
  srv->add_option_function<std::string>(
         "--spec-mode", [&serve](const std::string& v) { serve.spec_replay = v == "replay"; },
         "how linear layers roll back to the accepted drafts: replay (default) or states")
      ->check(CLI::IsMember({"replay", "states"}));
  srv->add_option("--port", serve.port, "port to listen on (default 8080; 0: any free port)")
      ->check(CLI::Range(int64_t{0}, int64_t{65535}));
  srv->add_option("--device", serve.device, "cpu, cuda, or auto (default: cuda when visible)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  srv->add_option("--max-waiting", serve.max_waiting,
                  "requests queued before the admission; more are answered 429 (default 256)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  srv->add_option("--max-running", serve.max_running,
                  "requests generating at once (default 64; also bounded by the memory)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  srv->add_option("--default-max-tokens", serve.default_max_tokens,
                  "max_tokens of a request that gives none (default 256)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  srv->add_option("--budget-mib", serve.budget_mib,
                  "memory for state slots + KV pages (default: sized for --max-running requests)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  srv->add_option("--state-ratio", serve.state_ratio,
                  "state-pool : KV-pool bytes of --budget-mib (default 0.9; higher: more state "
                  "slots, fewer KV pages)")
      ->check(CLI::Range(0.001, 1000.0));
  srv->add_option("--read-timeout", serve.read_timeout_s,
                  "seconds a request's header and body may take to arrive; a slower client is "
                  "disconnected (default 10)")
      ->check(CLI::Range(0.05, 3600.0));
  srv->add_option("--tensor-parallel", serve.tensor_parallel,
                  "split the model by head over N ranks (on the CPU: N threads of this process; "
                  "on CUDA: one GPU per rank, the sums by NCCL); the memory budget is each "
                  "rank's (default 1: off)");
  srv->add_option("--http-threads", serve.http_threads, "threads serving the connections")
      ->check(CLI::Range(1, 64));
  int serve_threads = 0;
  srv->add_option("--threads", serve_threads,
                  "CPU threads of the model (default: $HYLA_NUM_THREADS, else the cores)")
      ->check(CLI::Range(1, 1024));

  hyla::cli::ChatOptions chat;
  CLI::App* ch = app.add_subcommand(
      "chat",
      "a conversation with a model in the terminal (one message per line; /reset, /exit), "
      "through its chat template, replies streamed token by token");
  ch->add_option("--model", chat.model_dir,
                 "checkpoint folder with tokenizer.json (default: the embedded demo model)");
  ch->add_option("--device", chat.device, "cpu, cuda, or auto (default: cuda when visible)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  ch->add_option("--system", chat.system, "a system message opening the conversation");
  ch->add_option("--max-tokens", chat.max_tokens, "tokens per reply at most (default 512)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  ch->add_option("--temperature", chat.temperature, "0 = greedy (default 0.7)")
      ->check(CLI::Range(0.0f, 100.0f));
  ch->add_option("--top-p", chat.top_p, "nucleus mass, 1 = off (default 0.95)")
      ->check(CLI::Range(0.0f, 1.0f));
  ch->add_option("--seed", chat.seed, "seed of the first reply's draws (reply n: seed + n)")
      ->check(CLI::Range(int64_t{0}, INT64_MAX));
  int chat_threads = 0;
  ch->add_option("--threads", chat_threads,
                 "CPU threads (default: $HYLA_NUM_THREADS, else the cores this process may use)")
      ->check(CLI::Range(1, 1024));

#ifdef HYLA_WITH_PCRE2
  std::string tokenizer_path, tokenizer_model;
  CLI::App* tok = app.add_subcommand(
      "tokenize", "UTF-8 text on stdin -> the token ids as one JSON array on stdout");
  tok->add_option("--tokenizer", tokenizer_path, "a Hugging Face tokenizer.json");
  tok->add_option("--model", tokenizer_model, "a model folder: its tokenizer.json");
  CLI::App* detok =
      app.add_subcommand("detokenize", "a JSON array of token ids on stdin -> the text on stdout");
  detok->add_option("--tokenizer", tokenizer_path, "a Hugging Face tokenizer.json");
  detok->add_option("--model", tokenizer_model, "a model folder: its tokenizer.json");
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help / --version: 0; a usage error: 2, as is usual
  }
#ifdef HYLA_WITH_PCRE2
  if (tok->parsed()) return hyla::cli::run_tokenize(tokenizer_path, tokenizer_model);
  if (detok->parsed()) return hyla::cli::run_detokenize(tokenizer_path, tokenizer_model);
#endif
  if (gen->parsed()) {
    if (threads > 0) hyla::set_num_threads(threads);
    if (verbose) {
      std::fprintf(stderr, "cpu: %s; OpenBLAS kernels for it: %s\nthreads: %s\n",
                   hyla::cpu_features().summary().c_str(),
                   hyla::blas_core_for(hyla::cpu_features()).c_str(),
                   hyla::threading_summary().c_str());
    }
    return hyla::cli::run_generate(generate);
  }
  if (bn->parsed()) {
    if (bench_threads > 0) hyla::set_num_threads(bench_threads);
    return hyla::cli::run_bench(bench);
  }
  if (srv->parsed()) {
    if (serve_threads > 0) hyla::set_num_threads(serve_threads);
    return hyla::cli::run_serve(serve);
  }
  if (ch->parsed()) {
    if (chat_threads > 0) hyla::set_num_threads(chat_threads);
    return hyla::cli::run_chat(chat);
  }
  if (tmpl->parsed()) return hyla::cli::run_template(template_model);
  if (inspect->parsed()) return hyla::cli::run_inspect(inspect_path, inspect_options);
  if (sc->parsed()) return hyla::cli::run_selfcheck(selfcheck);
  std::printf("%s", app.help().c_str());
  return 0;
}
