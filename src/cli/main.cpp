// The `hyla` command. Subcommands: selfcheck (CPU check + short benchmark of the delta-rule core),
// inspect (a checkpoint's tensors per layer and role).
// Later issues add generate, serve, bench and inspect.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/inspect.h"
#include "cli/selfcheck.h"

int main(int argc, char** argv) {
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

  std::string inspect_path;
  CLI::App* inspect = app.add_subcommand(
      "inspect", "per-layer tensors of a model: roles, shapes, dtypes, parameter counts");
  inspect->add_option("path", inspect_path, "checkpoint folder or config.json")->required();

  CLI11_PARSE(app, argc, argv);
  if (inspect->parsed()) return hyla::cli::run_inspect(inspect_path);
  if (sc->parsed()) return hyla::cli::run_selfcheck(selfcheck);
  std::printf("%s", app.help().c_str());
  return 0;
}
