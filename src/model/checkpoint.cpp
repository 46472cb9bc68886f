// Checkpoint: a folder of safetensors files behind one name -> tensor lookup (see checkpoint.h).
#include "model/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <type_traits>
#include <utility>

#include "core/parallel.h"
#include "model/json_file.h"

namespace hyla::model {

namespace {

namespace fs = std::filesystem;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d)
    s += str_cat(d ? ", " : "", shape[d] == kAnyDim ? std::string("*") : str_cat(shape[d]));
  return s + "]";
}

// Levenshtein distance between a and b, or any value above `limit` once it is sure to exceed it.
size_t edit_distance(std::string_view a, std::string_view b, size_t limit) {
  const size_t gap = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (gap > limit) return limit + 1;
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    size_t row_min = cur[0];
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
      row_min = std::min(row_min, cur[j]);
    }
    if (row_min > limit) return limit + 1;
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// Element conversion for load(): reads a (possibly unaligned) source element as fp32.
template <typename Src>
float read_as_f32(const unsigned char* p) {
  Src x;
  std::memcpy(&x, p, sizeof(Src));
  if constexpr (std::is_same_v<Src, double>) {
    return float(x);
  } else {
    return load_f32(&x);
  }
}

bool is_float_source(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16 || t == DType::kF64;
}
bool is_float_output(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

// Calls fn(Type{}) for a float dtype of is_float_source.
template <typename Fn>
void visit_float(DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: fn(float{}); return;
    case DType::kBF16: fn(bf16{}); return;
    case DType::kF16: fn(f16{}); return;
    case DType::kF64: fn(double{}); return;
    default: HYLA_CHECK(false, "visit_float: ", dtype_name(t), " is not a float type");
  }
}

// Converts n elements of type Src at `src` to Dst at `dst`, in blocks across the worker threads.
template <typename Src, typename Dst>
void convert(const void* src, Dst* dst, int64_t n) {
  constexpr int64_t kBlock = int64_t{1} << 16;
  const auto* bytes = static_cast<const unsigned char*>(src);
  parallel_for((n + kBlock - 1) / kBlock, [&](int64_t block) {
    const int64_t end = std::min(n, (block + 1) * kBlock);
    for (int64_t i = block * kBlock; i < end; ++i)
      store_f32(dst + i, read_as_f32<Src>(bytes + i * int64_t(sizeof(Src))));
  });
}

}  // namespace

Result<Checkpoint> Checkpoint::open(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status))
    return Status(ErrorCode::kNotFound, str_cat("checkpoint '", path, "' does not exist"));

  Checkpoint ckpt;
  ckpt.source_ = path;
  if (!fs::is_directory(status)) {  // a single .safetensors file
    const std::string parent = fs::path(path).parent_path().string();
    ckpt.dir_ = parent.empty() ? "." : parent;
    Result<SafetensorsFile> file = SafetensorsFile::open(path);
    if (!file.ok()) return file.status();
    ckpt.files_.push_back(std::move(file).value());
  } else {
    ckpt.dir_ = path;
    const std::string single = (fs::path(path) / kSingleFile).string();
    const std::string index = (fs::path(path) / kIndexFile).string();
    if (fs::exists(single, ec)) {
      Result<SafetensorsFile> file = SafetensorsFile::open(single);
      if (!file.ok()) return file.status();
      ckpt.files_.push_back(std::move(file).value());
    } else if (fs::exists(index, ec)) {
      HYLA_RETURN_IF_ERROR(ckpt.open_index(index));
    } else {
      int64_t others = 0;
      for (const auto& item : fs::directory_iterator(path, ec))
        others += item.path().extension() == ".safetensors" ? 1 : 0;
      return Status(ErrorCode::kNotFound,
                    str_cat("checkpoint '", path, "' has neither ", kSingleFile, " nor ",
                            kIndexFile, " (it has ", others, " other .safetensors files)"));
    }
  }
  HYLA_RETURN_IF_ERROR(ckpt.index_tensors());
  return ckpt;
}

Status Checkpoint::open_index(const std::string& index_path) {
  Result<nlohmann::json> index = read_json_file(index_path);
  if (!index.ok()) return index.status();
  const auto weight_map = index->find("weight_map");
  if (!index->is_object() || weight_map == index->end() || !weight_map->is_object())
    return invalid_argument(index_path, ": no \"weight_map\" object (tensor name -> shard file)");

  std::map<std::string, std::vector<std::string>> names_by_shard;  // sorted by shard file name
  for (const auto& [name, shard] : weight_map->items()) {
    if (!shard.is_string())
      return invalid_argument(index_path, ": weight_map entry of '", text_excerpt(name),
                              "' is not a file name: ", json_excerpt(shard));
    names_by_shard[shard.get<std::string>()].push_back(name);
  }
  for (const auto& [shard, names] : names_by_shard) {
    const std::string shard_path = (fs::path(dir_) / shard).string();
    std::error_code ec;
    if (!fs::exists(shard_path, ec))
      return Status(ErrorCode::kNotFound,
                    str_cat(index_path, ": weight_map puts '", text_excerpt(names.front()),
                            "' (and ", names.size() - 1, " more) in shard '", text_excerpt(shard),
                            "', but ", text_excerpt(shard_path), " does not exist"));
    Result<SafetensorsFile> file = SafetensorsFile::open(shard_path);
    if (!file.ok()) return file.status();
    for (const std::string& name : names) {
      if (file->find(name) == nullptr)
        return invalid_argument(index_path, ": weight_map puts '", text_excerpt(name),
                                "' in shard '", text_excerpt(shard),
                                "', but that shard does not have it (it has ",
                                file->tensors().size(), " tensors)");
    }
    files_.push_back(std::move(file).value());
  }
  return ok_status();
}

Status Checkpoint::index_tensors() {
  // Every tensor of every file counts (as in transformers, which loads whole shards): the index
  // says where to look, the shards say what there is.
  for (const SafetensorsFile& file : files_) {
    for (const TensorEntry& entry : file.tensors()) {
      const auto [it, inserted] = entries_.emplace(entry.name, &entry);
      if (!inserted)
        return invalid_argument("checkpoint '", source_, "': tensor '", entry.name,
                                "' is in two shards: ", it->second->file, " and ", entry.file);
    }
  }
  // Multimodal checkpoints nest the text decoder (Qwen3.5: model.language_model.*, Kimi:
  // language_model.model.* and language_model.lm_head.*): make its tensors reachable under the
  // text-only names the architectures' mapping tables use, unless those exist already.
  static const std::pair<std::string_view, std::string_view> kWrappers[] = {
      {"model.language_model.", "model."},
      {"language_model.model.", "model."},
      {"language_model.lm_head.", "lm_head."},
  };
  std::vector<std::pair<std::string, const TensorEntry*>> aliases;
  for (const auto& [name, entry] : entries_)
    for (const auto& [wrapped, plain] : kWrappers)
      if (name.starts_with(wrapped))
        aliases.emplace_back(str_cat(plain, name.substr(wrapped.size())), entry);
  wraps_text_decoder_ = !aliases.empty();
  for (auto& [alias, entry] : aliases) entries_.emplace(std::move(alias), entry);
  return ok_status();
}

bool Checkpoint::is_text_decoder_name(std::string_view stored_name) {
  return stored_name.starts_with("model.language_model.") ||
         stored_name.starts_with("language_model.");
}

const TensorEntry* Checkpoint::find(std::string_view name) const {
  const auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : it->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> names;
  names.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) names.push_back(name);
  return names;
}

std::vector<std::string> Checkpoint::similar_names(std::string_view name, size_t count) const {
  if (count == 0) return {};
  std::vector<std::pair<size_t, const std::string*>> best;  // (distance, name), closest first
  for (const auto& [candidate, entry] : entries_) {
    const size_t limit =
        best.size() < count ? std::numeric_limits<size_t>::max() - 1 : best.back().first;
    const size_t distance = edit_distance(name, candidate, limit);
    if (distance > limit || (best.size() == count && distance == limit)) continue;
    best.emplace_back(distance, &candidate);
    std::stable_sort(best.begin(), best.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    if (best.size() > count) best.pop_back();
  }
  std::vector<std::string> names;
  for (const auto& [distance, candidate] : best) names.push_back(*candidate);
  return names;
}

Status Checkpoint::missing(std::string_view name) const {
  std::string similar;
  for (const std::string& s : similar_names(name)) similar += str_cat(", '", s, "'");
  return Status(ErrorCode::kNotFound,
                str_cat("missing tensor '", name, "' in ", source_, " (", entries_.size(),
                        " tensors", similar.empty() ? "" : "; similar:", similar.substr(1), ")"));
}

Status Checkpoint::check(std::string_view name, std::span<const int64_t> expected_shape) const {
  const TensorEntry* entry = find(name);
  if (entry == nullptr) return missing(name);
  bool match = entry->shape.size() == expected_shape.size();
  for (size_t d = 0; match && d < expected_shape.size(); ++d)
    match = expected_shape[d] == kAnyDim || expected_shape[d] == entry->shape[d];
  if (!match)
    return invalid_argument("tensor '", name, "' has shape ", entry->shape_string(), ", expected ",
                            shape_string(expected_shape), " (in ", entry->file, ")");
  return ok_status();
}

Result<Tensor> Checkpoint::load(std::string_view name,
                                std::initializer_list<int64_t> expected_shape, DType dtype) const {
  return load(name, std::span<const int64_t>(expected_shape.begin(), expected_shape.size()), dtype);
}

Result<Tensor> Checkpoint::load(std::string_view name, std::span<const int64_t> expected_shape,
                                DType dtype) const {
  HYLA_RETURN_IF_ERROR(check(name, expected_shape));
  return load_any_shape(name, dtype);
}

Result<Tensor> Checkpoint::load_any_shape(std::string_view name, DType dtype) const {
  const TensorEntry* entry = find(name);
  if (entry == nullptr) return missing(name);
  if (entry->dtype != dtype && !(is_float_source(entry->dtype) && is_float_output(dtype)))
    return unsupported("tensor '", name, "' is ", dtype_name(entry->dtype),
                       " and cannot be loaded as ", dtype_name(dtype),
                       " (f32/bf16/f16/f64 convert to f32/bf16/f16; other dtypes load as "
                       "themselves)");

  Tensor out = Tensor::empty(int(entry->shape.size()), entry->shape.data(), dtype);
  if (entry->dtype == dtype) {
    if (entry->nbytes > 0) std::memcpy(out.view().raw(), entry->data, size_t(entry->nbytes));
    return out;
  }
  visit_float(entry->dtype, [&](auto src) {
    using Src = decltype(src);
    switch (dtype) {
      case DType::kF32: convert<Src>(entry->data, out.data<float>(), entry->numel()); break;
      case DType::kBF16: convert<Src>(entry->data, out.data<bf16>(), entry->numel()); break;
      case DType::kF16: convert<Src>(entry->data, out.data<f16>(), entry->numel()); break;
      default: HYLA_CHECK(false, "load: unexpected output dtype ", dtype_name(dtype));
    }
  });
  return out;
}

namespace {

/// The decimal number at the start of `s` and its length; numbers beyond 10^9 read as 10^9 (no
/// real checkpoint comes near). {-1, 0} when `s` does not start with a digit.
std::pair<int64_t, size_t> leading_number(std::string_view s) {
  int64_t value = 0;
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') {
    value = std::min<int64_t>(value * 10 + (s[digits] - '0'), 1'000'000'000);
    ++digits;
  }
  return digits == 0 ? std::pair<int64_t, size_t>{-1, 0} : std::pair{value, digits};
}

}  // namespace

CheckpointHoldings checkpoint_holdings(const Checkpoint& ckpt) {
  constexpr std::string_view kLayers = "model.layers.", kExperts = ".experts.";
  CheckpointHoldings holdings;
  for (const std::string& name : ckpt.names()) {
    if (!name.starts_with(kLayers)) continue;
    const std::string_view rest = std::string_view(name).substr(kLayers.size());
    const auto [layer, digits] = leading_number(rest);
    if (layer < 0 || digits >= rest.size() || rest[digits] != '.') continue;
    holdings.layers = std::max(holdings.layers, layer + 1);
    const size_t at = rest.find(kExperts, digits);
    if (at == std::string_view::npos) continue;
    const std::string_view tail = rest.substr(at + kExperts.size());
    const auto [expert, expert_digits] = leading_number(tail);
    if (expert >= 0 && expert_digits < tail.size() && tail[expert_digits] == '.')
      holdings.experts = std::max(holdings.experts, expert + 1);
  }
  return holdings;
}

}  // namespace hyla::model
