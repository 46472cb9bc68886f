// `hyla inspect MODEL_DIR | CONFIG.json`: the architecture's mapping table, per layer kind, with
// tensors grouped by role, shapes, dtypes (when a checkpoint is there), parameter counts and
// shares; then the linear-attention accounting the seed does for Kimi K3 (gates vs content
// projections) and the model's parameters per role (Kimi K3: Attention-Residual pairs and the
// latent MoE projections included). Config warnings (a vision tower that is not read) go to
// stderr.
#include "cli/inspect.h"

#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/weight_loader.h"
#include "runtime/memory/memory_plan.h"

namespace hyla::cli {

namespace {

using model::WeightRole;
using model::WeightSpec;

/// 30618088704 -> "30,618,088,704"
std::string grouped(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

double percent(int64_t part, int64_t whole) {
  return whole > 0 ? 100.0 * double(part) / double(whole) : 0.0;
}

/// The layer-local part of a tensor name: "model.layers.7.self_attn.q_proj.weight" ->
/// "self_attn.q_proj.weight".
std::string local_name(const WeightSpec& s) {
  if (s.layer < 0) return s.name;
  const std::string prefix = str_cat("layers.", s.layer, ".");
  const size_t at = s.name.find(prefix);
  return at == std::string::npos ? s.name : s.name.substr(at + prefix.size());
}

/// Layers with the same mixer and MLP kind and the same tensor list print once.
struct LayerGroup {
  model::MixerKind mixer;
  model::MlpKind mlp;
  std::vector<int64_t> layers;
  std::vector<const WeightSpec*> specs;
};

std::string layer_list(const std::vector<int64_t>& layers) {
  std::string s;
  for (size_t i = 0; i < layers.size(); ++i) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    s += str_cat(s.empty() ? "" : ",", layers[i]);
    if (j > i) s += str_cat("-", layers[j]);
    i = j;
  }
  return s;
}

/// Mapping-table name -> the name the checkpoint stores it under (where the architecture
/// resolves it to another spelling).
using NameMap = std::map<std::string, std::string>;

void print_group(const LayerGroup& g, const model::Checkpoint* ckpt, const NameMap& stored_as) {
  std::printf("\nlayers %s (%zu x): %s mixer, %s MLP\n", layer_list(g.layers).c_str(),
              g.layers.size(), model::mixer_kind_name(g.mixer),
              g.mlp == model::MlpKind::kMoe ? "MoE" : "dense");
  int64_t mixer_total = 0, layer_total = 0;
  for (const WeightSpec* s : g.specs) {
    layer_total += s->numel();
    if (model::is_mixer_role(s->role)) mixer_total += s->numel();
  }
  // Per tensor, grouped by role; experts collapse into one line per role.
  std::map<WeightRole, std::vector<const WeightSpec*>> by_role;
  for (const WeightSpec* s : g.specs) by_role[s->role].push_back(s);
  std::printf("  %-22s %-44s %-20s %-5s %16s %8s\n", "role", "tensor", "shape", "dtype", "params",
              "% mixer");
  for (const auto& [role, specs] : by_role) {
    const bool collapse = role == WeightRole::kExperts && specs.size() > 6;
    int64_t role_total = 0;
    for (const WeightSpec* s : specs) role_total += s->numel();
    if (collapse) {
      std::printf("  %-22s %-44s %-20s %-5s %16s %8s\n", model::weight_role_name(role),
                  str_cat(specs.size(), " tensors").c_str(), "", "", grouped(role_total).c_str(),
                  "");
      continue;
    }
    for (const WeightSpec* s : specs) {
      const auto stored = stored_as.find(s->name);
      const model::TensorEntry* e =
          ckpt ? ckpt->find(stored != stored_as.end() ? stored->second : s->name) : nullptr;
      const std::string dtype = e ? std::string(model::safetensors_dtype_name(e->dtype)) : "-";
      char share[16] = "";
      if (model::is_mixer_role(role))
        std::snprintf(share, sizeof(share), "%.2f%%", percent(s->numel(), mixer_total));
      std::printf("  %-22s %-44s %-20s %-5s %16s %8s\n", model::weight_role_name(role),
                  local_name(*s).c_str(), shape_string(s->shape).c_str(), dtype.c_str(),
                  grouped(s->numel()).c_str(), share);
    }
  }
  std::printf("  mixer parameters per layer: %s; whole layer: %s\n", grouped(mixer_total).c_str(),
              grouped(layer_total).c_str());
}

}  // namespace

namespace {

int inspect(const std::string& path, const InspectOptions& options) {
  constexpr int64_t kMaxBudgetMib = std::numeric_limits<int64_t>::max() >> 20;  // bytes fit
  if (options.tensor_parallel < 1 || options.budget_mib < 1 || options.budget_mib > kMaxBudgetMib) {
    std::fprintf(stderr,
                 "hyla inspect: --tensor-parallel %d, --budget-mib %lld: expected both >= 1 "
                 "(the budget at most %lld MiB)\n",
                 options.tensor_parallel, (long long)options.budget_mib, (long long)kMaxBudgetMib);
    return 1;
  }
  Result<model::LoadedConfig> loaded = model::load_config(path);
  if (!loaded.ok()) {
    std::fprintf(stderr, "hyla inspect: %s\n", loaded.status().message().c_str());
    return 1;
  }
  const model::ModelConfig& c = loaded->config;
  // A folder with safetensors: also show the stored dtypes and check the tensors.
  std::optional<model::Checkpoint> ckpt;
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec) &&
      (fs::exists(fs::path(path) / "model.safetensors", ec) ||
       fs::exists(fs::path(path) / "model.safetensors.index.json", ec))) {
    Result<model::Checkpoint> opened = model::Checkpoint::open(path);
    if (!opened.ok()) {
      std::fprintf(stderr, "hyla inspect: %s\n", opened.status().message().c_str());
      return 1;
    }
    ckpt.emplace(std::move(opened).value());
  }
  const std::vector<WeightSpec> specs = loaded->arch->checkpoint_weights(c);
  int64_t total = 0;
  for (const WeightSpec& s : specs) total += s.numel();
  for (const std::string& warning : c.warnings)
    std::fprintf(stderr, "hyla inspect: warning: %s\n", warning.c_str());
  std::printf("%s: %s\n", path.c_str(), loaded->arch->description);
  std::printf("model_type %s, %lld layers, hidden %lld, vocab %lld, %s parameters in %zu tensors\n",
              c.model_type.c_str(), (long long)c.num_layers, (long long)c.hidden_size,
              (long long)c.vocab_size, grouped(total).c_str(), specs.size());
  for (model::MixerKind kind :
       {model::MixerKind::kGatedDeltaNet, model::MixerKind::kKimiDelta,
        model::MixerKind::kFullAttention, model::MixerKind::kLatentAttention}) {
    if (const int64_t n = c.num_layers_of(kind))
      std::printf("  %lld %s layers\n", (long long)n, model::mixer_kind_name(kind));
  }

  // Model-level tensors.
  std::printf("\nmodel-level tensors\n");
  for (const WeightSpec& s : specs) {
    if (s.layer >= 0) continue;
    std::printf("  %-22s %-44s %-20s %16s\n", model::weight_role_name(s.role), s.name.c_str(),
                shape_string(s.shape).c_str(), grouped(s.numel()).c_str());
  }

  // Layers grouped by identical structure (same kinds and the same local tensor names / shapes).
  std::vector<LayerGroup> groups;
  std::map<std::string, size_t> group_of;
  std::vector<std::vector<const WeightSpec*>> per_layer(size_t(c.num_layers));
  for (const WeightSpec& s : specs)
    if (s.layer >= 0) per_layer[size_t(s.layer)].push_back(&s);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    std::string key = str_cat(int(c.mixers[size_t(i)]), "/", int(c.mlps[size_t(i)]));
    for (const WeightSpec* s : per_layer[size_t(i)]) {
      key += '|';
      key += local_name(*s);
      key += shape_string(s->shape);
    }
    auto [it, fresh] = group_of.emplace(key, groups.size());
    if (fresh) groups.push_back({c.mixers[size_t(i)], c.mlps[size_t(i)], {}, per_layer[size_t(i)]});
    groups[it->second].layers.push_back(i);
  }
  // The checkpoint's own spelling of each tensor (aliases, stored shapes the loader accepts).
  std::vector<WeightSpec> resolved = specs;
  NameMap stored_as;
  if (ckpt && loaded->arch->resolve_weights) {
    loaded->arch->resolve_weights(*ckpt, c, resolved);
    for (size_t i = 0; i < specs.size(); ++i)
      if (resolved[i].name != specs[i].name) stored_as.emplace(specs[i].name, resolved[i].name);
  }
  for (const LayerGroup& g : groups) print_group(g, ckpt ? &*ckpt : nullptr, stored_as);

  // The seed's accounting, per mixer kind over the whole model.
  std::printf("\nmixer accounting\n");
  for (const model::MixerAccounting& a : model::mixer_accounting(c, specs)) {
    if (a.per_layer == 0) {
      std::printf("  %s: %lld layers (not all alike), %s parameters\n",
                  model::mixer_kind_name(a.kind), (long long)a.layers, grouped(a.total).c_str());
      continue;
    }
    std::printf("  %s: %s parameters per layer x %lld layers = %s\n",
                model::mixer_kind_name(a.kind), grouped(a.per_layer).c_str(), (long long)a.layers,
                grouped(a.total).c_str());
    if (!model::is_linear_mixer(a.kind)) continue;
    std::printf("    gates (write strength beta + forget gate alpha): %s = %.2f%%\n",
                grouped(a.gates).c_str(), percent(a.gates, a.per_layer));
    std::printf("    content / output projections (q/k/v/g/o matrices): %s = %.2f%%\n",
                grouped(a.projections).c_str(), percent(a.projections, a.per_layer));
  }

  // Totals per role over the whole model.
  std::map<WeightRole, std::pair<int64_t, int64_t>> by_role;  // role -> tensors, parameters
  for (const WeightSpec& s : specs) {
    ++by_role[s.role].first;
    by_role[s.role].second += s.numel();
  }
  std::printf("\nparameters by role\n");
  for (const auto& [role, count] : by_role)
    std::printf("  %-22s %8lld tensors %22s = %6.2f%%\n", model::weight_role_name(role),
                (long long)count.first, grouped(count.second).c_str(),
                percent(count.second, total));
  if (c.attn_res_block_size > 0)
    std::printf(
        "  Attention Residuals: blocks of %lld layers, %lld block snapshots per token "
        "(embedding first)\n",
        (long long)c.attn_res_block_size, (long long)c.attn_res_blocks());

  if (options.tensor_parallel > 1) {
    Result<runtime::TensorParallelPlan> plan =
        runtime::plan_tensor_parallel(c, options.tensor_parallel, options.budget_mib << 20);
    if (!plan.ok()) {
      std::fprintf(stderr, "hyla inspect: %s\n", plan.status().message().c_str());
      return 1;
    }
    std::printf("\n%s", plan->summary().c_str());
  }

  // Checkpoint agreement.
  if (ckpt) {
    Status check = model::check_checkpoint(*ckpt, resolved);
    std::printf("\ncheckpoint: %s\n", check.ok() ? "every tensor present with the expected shape"
                                                 : check.message().c_str());
    return check.ok() ? 0 : 1;
  }
  return 0;
}

}  // namespace

int run_inspect(const std::string& path, const InspectOptions& options) {
  // The loaders return errors as Status; this net turns anything they or the standard library
  // still throw (std::filesystem on a name too long) into a message instead of a terminate.
  try {
    return inspect(path, options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hyla inspect: %s: %s\n", path.c_str(), e.what());
    return 1;
  }
}

}  // namespace hyla::cli
