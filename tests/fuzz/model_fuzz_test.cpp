// Fuzzing model loading: config.json files, safetensors headers and shard indexes mutated from the
// golden checkpoints (tests/data/golden/<arch>) with fixed seeds, each loaded in-process through
// model::load_model from a temp folder. Every case must end in an error Status whose message names
// the folder or a file in it, or in a model that loads and runs three tokens: no crash, no
// exception, no hang. Then the regression cases of issue 20 (deep nesting, divisors of 0, 1e9
// layers / experts, tensors the config never reads). A failing case prints its seed and mutation.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/test_files.h"
#include "testing.h"

namespace hyla::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDir;

constexpr const char* kArchs[] = {"qwen3_next", "qwen3_5", "qwen3_5_moe", "kimi_linear", "kimi_k3"};
constexpr int kConfigCases = 48;  // per architecture
constexpr int kHeaderCases = 36;
constexpr int kIndexCases = 8;
constexpr int kDeep = 100000;

/// Added to every case seed: 0 by default (the fixed cases); HYLA_FUZZ_SEED=<n> runs other ones.
uint32_t seed_offset() {
  const char* env = std::getenv("HYLA_FUZZ_SEED");
  return env != nullptr ? uint32_t(std::strtoul(env, nullptr, 10)) : 0u;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string deep_array() { return std::string(kDeep, '[') + std::string(kDeep, ']'); }

/// One golden checkpoint, split into what the mutations edit.
struct Golden {
  std::string arch;
  std::string dir;
  std::string config;   ///< config.json text
  std::string weights;  ///< path of model.safetensors
  json header;          ///< its parsed header
  std::string data;     ///< its data section
};

const Golden& golden(const std::string& arch) {
  static std::map<std::string, Golden> cache;
  auto it = cache.find(arch);
  if (it != cache.end()) return it->second;
  Golden g;
  g.arch = arch;
  g.dir = testing::golden_dir() + "/" + arch;
  g.config = read_file(g.dir + "/config.json");
  g.weights = g.dir + "/model.safetensors";
  const std::string bytes = read_file(g.weights);
  HYLA_CHECK(bytes.size() >= 8, g.weights, " is too short");
  uint64_t n = 0;
  for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(bytes[size_t(b)]);
  g.header = json::parse(bytes.substr(8, size_t(n)));
  g.data = bytes.substr(8 + size_t(n));
  return cache.emplace(arch, std::move(g)).first->second;
}

/// A safetensors file from a header and a data section (header padded to 8 bytes).
std::string safetensors_bytes(std::string header, const std::string& data) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int b = 0; b < 8; ++b) out[size_t(b)] = static_cast<char>((header.size() >> (8 * b)) & 0xff);
  return out + header + data;
}

/// The folder of one case: config.json and model.safetensors (a link to the golden file unless
/// the case rewrites it).
struct CaseDir {
  TempDir dir;
  std::string config() const { return dir.file("config.json"); }
  std::string weights() const { return dir.file("model.safetensors"); }
  void link_weights(const Golden& g) const { fs::create_symlink(g.weights, weights()); }
};

/// Loads the folder; an error must name the folder (every file of the case is in it); a model
/// that loads must run three tokens. True when it loaded.
bool expect_clean_outcome(const CaseDir& c, const std::string& what) {
  SCOPED_TRACE(what);
  try {
    Result<std::unique_ptr<Model>> model = load_model(c.dir.path());
    if (!model.ok()) {
      const std::string& message = model.status().message();
      if (std::getenv("HYLA_FUZZ_VERBOSE"))
        std::printf("%s\n  -> %s\n", what.c_str(), message.substr(0, 300).c_str());
      EXPECT_FALSE(message.empty());
      EXPECT_NE(message.find(c.dir.path()), std::string::npos)
          << "the message does not name the file: " << message;
      EXPECT_LT(message.size(), 4000u) << message.substr(0, 300);
      return false;
    }
    const int64_t vocab = (*model)->config().vocab_size;
    const std::vector<int32_t> ids = {1, int32_t(7 % vocab), int32_t(300 % vocab)};
    SequenceState state = (*model)->new_sequence(8);
    Result<Tensor> logits = (*model)->forward(ids, state);
    EXPECT_TRUE(logits.ok() || !logits.status().message().empty());
    return true;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw " << e.what();
  } catch (...) {
    ADD_FAILURE() << "threw a non-std exception";
  }
  return false;
}

/// One line per family and architecture: how many mutated cases still loaded (the rest were
/// refused), so a run shows that the mutations reach past the first check.
void report(const char* family, const char* arch, int cases, int loaded) {
  std::printf("[ fuzz     ] %s %s: %d cases, %d loaded, %d refused\n", arch, family, cases, loaded,
              cases - loaded);
}

// ---- JSON mutations ----

/// Every JSON pointer into `j` (containers and leaves, not the root).
void collect_pointers(const json& j, const json::json_pointer& at,
                      std::vector<json::json_pointer>& out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      out.push_back(at / key);
      collect_pointers(value, at / key, out);
    }
  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      out.push_back(at / i);
      collect_pointers(j[i], at / i, out);
    }
  }
}

template <typename T>
const T& pick(std::mt19937& rng, const std::vector<T>& items) {
  return items[std::uniform_int_distribution<size_t>(0, items.size() - 1)(rng)];
}

json odd_value(std::mt19937& rng) {
  static const std::vector<json> kValues = {json("text"),        json(true),
                                            json(nullptr),       json(4.5),
                                            json::array(),       json::object(),
                                            json::array({1, 2}), json{{"a", 1}},
                                            json(-0.0),          json(std::string(10000, 'z'))};
  return pick(rng, kValues);
}

json odd_integer(std::mt19937& rng) {
  static const std::vector<json> kValues = {json(0),
                                            json(-1),
                                            json(1),
                                            json(2),
                                            json(3),
                                            json(7),
                                            json(1'000'000'000),
                                            json(1e9),
                                            json(std::numeric_limits<int64_t>::max()),
                                            json(std::numeric_limits<uint64_t>::max()),
                                            json(std::numeric_limits<int64_t>::min()),
                                            json(1e300),
                                            json(0.5),
                                            json(int64_t{1} << 31),
                                            json(4097),
                                            json(65537)};
  return pick(rng, kValues);
}

json odd_string(std::mt19937& rng) {
  static const std::vector<json> kValues = {json(""),
                                            json("full_attention"),
                                            json("linear_attention"),
                                            json("sparse"),
                                            json("dense"),
                                            json("situ"),
                                            json("gelu"),
                                            json("qwen3_next"),
                                            json("kimi_k3"),
                                            json("kimi_linear"),
                                            json("qwen3_5_moe"),
                                            json(std::string(5000, 'q')),
                                            json("\xc3\xa9\xe2\x82\xac")};
  return pick(rng, kValues);
}

/// Replaces the value at `at` by `kDeep` nested arrays, in the dumped text.
std::string with_deep_value(json j, const json::json_pointer& at) {
  j[at] = "@@deep@@";
  std::string text = j.dump(1);
  const size_t pos = text.find("\"@@deep@@\"");
  return text.replace(pos, 10, deep_array());
}

/// One random mutation of the JSON text `text` (which parses to `j`); `what` describes it.
std::string mutate_json(const std::string& text, json j, std::mt19937& rng, std::string& what) {
  std::vector<json::json_pointer> pointers;
  collect_pointers(j, json::json_pointer(), pointers);
  std::vector<json::json_pointer> numbers, strings, arrays;
  for (const auto& p : pointers) {
    if (j[p].is_number()) numbers.push_back(p);
    if (j[p].is_string()) strings.push_back(p);
    if (j[p].is_array()) arrays.push_back(p);
  }
  const int op = std::uniform_int_distribution<int>(0, 9)(rng);
  switch (op) {
    case 0: {  // byte flips
      std::string out = text;
      const int flips = std::uniform_int_distribution<int>(1, 4)(rng);
      for (int f = 0; f < flips; ++f) {
        const size_t at = std::uniform_int_distribution<size_t>(0, out.size() - 1)(rng);
        out[at] = static_cast<char>(rng());
        what += str_cat(" flip@", at);
      }
      return out;
    }
    case 1: {  // truncation
      const size_t keep = std::uniform_int_distribution<size_t>(0, text.size() - 1)(rng);
      what += str_cat(" truncate to ", keep);
      return text.substr(0, keep);
    }
    case 2: {  // field deletion
      const json::json_pointer p = pick(rng, pointers);
      what += " delete " + p.to_string();
      j[p.parent_pointer()].is_object() ? (void)j[p.parent_pointer()].erase(p.back())
                                        : j[p.parent_pointer()].erase(std::stoul(p.back()));
      return j.dump(1);
    }
    case 3: {  // type change
      const json::json_pointer p = pick(rng, pointers);
      j[p] = odd_value(rng);
      what += " " + p.to_string() + " = " + j[p].dump().substr(0, 40);
      return j.dump(1);
    }
    case 4:
    case 5: {  // huge / zero / negative / float integers (twice as likely: the SIGFPE class)
      if (numbers.empty()) return text;
      const json::json_pointer p = pick(rng, numbers);
      j[p] = odd_integer(rng);
      what += " " + p.to_string() + " = " + j[p].dump();
      return j.dump(1);
    }
    case 6: {  // deep nesting
      const json::json_pointer p = pick(rng, pointers);
      what += " deep " + p.to_string();
      return with_deep_value(j, p);
    }
    case 7: {  // a duplicated key (nlohmann keeps the last)
      if (!j.is_object() || j.empty()) return text;
      std::vector<std::string> keys;
      for (const auto& [key, value] : j.items()) keys.push_back(key);
      const std::string key = pick(rng, keys);
      const std::string entry = json(key).dump() + ": " + odd_integer(rng).dump();
      std::string out = text;
      if (rng() % 2) {
        out.insert(out.find('{') + 1, entry + ",");
        what += " duplicate first " + key;
      } else {
        out.insert(out.rfind('}'), "," + entry);
        what += " duplicate last " + key;
      }
      return out;
    }
    case 8: {  // list edits (layer lists)
      if (arrays.empty()) return text;
      const json::json_pointer p = pick(rng, arrays);
      json& list = j[p];
      const int edit = int(rng() % 3);
      if (edit == 0 && !list.empty()) list.erase(list.size() - 1);
      if (edit == 1 && !list.empty()) list.push_back(list[0]);
      if (edit == 2) std::reverse(list.begin(), list.end());
      what += str_cat(" list ", p.to_string(), " edit ", edit);
      return j.dump(1);
    }
    default: {  // string values
      if (strings.empty()) return text;
      const json::json_pointer p = pick(rng, strings);
      j[p] = odd_string(rng);
      what += " " + p.to_string() + " = " + j[p].dump().substr(0, 40);
      return j.dump(1);
    }
  }
}

TEST(ModelFuzzTest, MutatedConfigs) {
  for (size_t a = 0; a < std::size(kArchs); ++a) {
    const char* arch = kArchs[a];
    const Golden& g = golden(arch);
    const json parsed = json::parse(g.config);
    int loaded = 0;
    for (int i = 0; i < kConfigCases; ++i) {
      const uint32_t seed = seed_offset() + 1000 + 100 * uint32_t(a) + uint32_t(i);
      std::mt19937 rng(seed);
      std::string what = str_cat(arch, " config seed ", seed, ":");
      CaseDir c;
      write_file(c.config(), mutate_json(g.config, parsed, rng, what));
      c.link_weights(g);
      loaded += expect_clean_outcome(c, what);
    }
    report("config.json", arch, kConfigCases, loaded);
  }
}

// ---- safetensors header mutations ----

/// One random mutation of a golden checkpoint file; returns the file's bytes.
std::string mutate_safetensors(const Golden& g, std::mt19937& rng, std::string& what) {
  json header = g.header;
  std::vector<std::string> names;
  for (const auto& [name, entry] : header.items())
    if (name != "__metadata__") names.push_back(name);
  const std::string name = pick(rng, names);
  json& entry = header[name];
  const std::string original = safetensors_bytes(g.header.dump(), g.data);
  const int op = std::uniform_int_distribution<int>(0, 13)(rng);
  what += str_cat(" op ", op, " on '", name, "'");
  switch (op) {
    case 0: {  // byte flips in the length and the header
      std::string out = original;
      const size_t header_end = 8 + g.header.dump().size();
      for (int f = 0; f < 3; ++f) {
        const size_t at = std::uniform_int_distribution<size_t>(0, header_end - 1)(rng);
        out[at] = static_cast<char>(rng());
        what += str_cat(" flip@", at);
      }
      return out;
    }
    case 1: {  // truncation anywhere
      const size_t keep = std::uniform_int_distribution<size_t>(0, original.size() - 1)(rng);
      what += str_cat(" truncate to ", keep);
      return original.substr(0, keep);
    }
    case 2: {  // dtype strings
      static const std::vector<json> kDtypes = {"F32", "BF16", "F16", "F64",     "I64",
                                                "I32", "I8",   "U8",  "F8_E4M3", "BOOL",
                                                "",    "f32",  42,    nullptr};
      entry["dtype"] = pick(rng, kDtypes);
      what += " dtype " + entry["dtype"].dump();
      break;
    }
    case 3: {  // shapes
      json& shape = entry["shape"];
      const int edit = int(rng() % 8);
      if (edit == 0) shape.push_back(1);
      if (edit == 1 && !shape.empty()) shape.erase(shape.size() - 1);
      if (edit == 2 && !shape.empty()) shape[0] = -shape[0].get<int64_t>();
      if (edit == 3 && !shape.empty()) shape[0] = int64_t{1} << 40;
      if (edit == 4 && !shape.empty()) shape[0] = 2.5;
      if (edit == 5) shape = json::array();
      if (edit == 6) shape = "x";
      if (edit == 7 && !shape.empty()) shape[0] = shape[0].get<int64_t>() * 2;
      what += str_cat(" shape edit ", edit);
      break;
    }
    case 4: {  // data offsets
      json& offsets = entry["data_offsets"];
      const uint64_t begin = offsets[0], end = offsets[1];
      const int edit = int(rng() % 8);
      if (edit == 0) offsets = {begin, g.data.size() + 8};
      if (edit == 1) offsets = {end, begin};
      if (edit == 2) offsets = {begin + 4, end + 4};
      if (edit == 3) offsets = header[pick(rng, names)]["data_offsets"];
      if (edit == 4) offsets = {begin};
      if (edit == 5) offsets = {"a", 1};
      if (edit == 6)
        offsets = {std::numeric_limits<uint64_t>::max() - 3, std::numeric_limits<uint64_t>::max()};
      if (edit == 7) offsets = {-4, 0};
      what += str_cat(" offsets edit ", edit);
      break;
    }
    case 5: {  // a field deleted
      static const std::vector<std::string> kFields = {"dtype", "shape", "data_offsets"};
      const std::string field = pick(rng, kFields);
      entry.erase(field);
      what += " delete " + field;
      break;
    }
    case 6:  // a tensor deleted
      header.erase(name);
      what += " delete tensor";
      break;
    case 7: {  // a tensor renamed
      static const std::vector<std::string> kNames = {
          "mtp.fc.weight",
          "model.layers.99.mlp.gate.weight",
          "model.extra.weight",
          "",
          "model.layers.0.self_attn.rotary_emb.inv_freq",
          "language_model.model.norm.weight"};
      json moved = entry;
      header.erase(name);
      std::string renamed = rng() % 2 ? pick(rng, kNames) : name;
      if (renamed == name)
        renamed[std::uniform_int_distribution<size_t>(0, name.size() - 1)(rng)] ^= 1;
      header[renamed] = moved;
      what += " renamed to '" + renamed + "'";
      break;
    }
    case 8:  // the same bytes under a second name (an overlap, unless empty)
      header[name + ".copy"] = entry;
      what += " duplicated";
      break;
    case 9: {  // metadata
      const int edit = int(rng() % 3);
      if (edit == 0) header["__metadata__"] = json::array({1});
      if (edit == 1) header["__metadata__"] = {{"format", 7}};
      if (edit == 2) header["__metadata__"] = {{"format", "pt"}, {"x", std::string(3000, 'm')}};
      what += str_cat(" metadata edit ", edit);
      break;
    }
    case 10: {  // the length field alone
      std::string out = original;
      uint64_t n = 0;
      for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<unsigned char>(out[size_t(b)]);
      static const std::vector<uint64_t> kDeltas = {0, 1, 8, 4096};
      const int edit = int(rng() % 4);
      const uint64_t length = edit == 0   ? 0
                              : edit == 1 ? n - 1
                              : edit == 2 ? n + pick(rng, kDeltas)
                                          : std::numeric_limits<uint64_t>::max();
      for (int b = 0; b < 8; ++b) out[size_t(b)] = static_cast<char>((length >> (8 * b)) & 0xff);
      what += str_cat(" length ", length);
      return out;
    }
    case 11: {  // deep nesting in an entry
      static const std::vector<std::string> kFields = {"dtype", "shape", "data_offsets"};
      const std::string field = pick(rng, kFields);
      entry[field] = "@@deep@@";
      std::string text = header.dump();
      text.replace(text.find("\"@@deep@@\""), 10, deep_array());
      what += " deep " + field;
      return safetensors_bytes(text, g.data);
    }
    case 12: {  // a duplicated key: the tensor again, first (the original wins) or last
      std::string text = header.dump();
      const std::string dup = json(name).dump() + ":" + odd_value(rng).dump();
      if (rng() % 2) {
        text.insert(1, dup + ",");
        what += " duplicate key first";
      } else {
        text.insert(text.size() - 1, "," + dup);
        what += " duplicate key last";
      }
      return safetensors_bytes(text, g.data);
    }
    default:  // a tensor's entry replaced by another kind of value
      header[name] = odd_value(rng);
      what += " entry = " + header[name].dump().substr(0, 40);
      break;
  }
  return safetensors_bytes(header.dump(), g.data);
}

TEST(ModelFuzzTest, MutatedSafetensorsHeaders) {
  for (size_t a = 0; a < std::size(kArchs); ++a) {
    const char* arch = kArchs[a];
    const Golden& g = golden(arch);
    int loaded = 0;
    for (int i = 0; i < kHeaderCases; ++i) {
      const uint32_t seed = seed_offset() + 2000 + 100 * uint32_t(a) + uint32_t(i);
      std::mt19937 rng(seed);
      std::string what = str_cat(arch, " safetensors seed ", seed, ":");
      CaseDir c;
      write_file(c.config(), g.config);
      write_file(c.weights(), mutate_safetensors(g, rng, what));
      loaded += expect_clean_outcome(c, what);
    }
    report("safetensors", arch, kHeaderCases, loaded);
  }
}

// ---- shard index mutations ----

TEST(ModelFuzzTest, MutatedShardIndexes) {
  for (size_t a = 0; a < std::size(kArchs); ++a) {
    const char* arch = kArchs[a];
    const Golden& g = golden(arch);
    json index = {{"metadata", {{"total_size", g.data.size()}}}, {"weight_map", json::object()}};
    for (const auto& [name, entry] : g.header.items())
      if (name != "__metadata__") index["weight_map"][name] = "model-00001-of-00001.safetensors";
    const std::string text = index.dump(1);
    int loaded = 0;
    for (int i = 0; i < kIndexCases; ++i) {
      const uint32_t seed = seed_offset() + 3000 + 100 * uint32_t(a) + uint32_t(i);
      std::mt19937 rng(seed);
      std::string what = str_cat(arch, " index seed ", seed, ":");
      CaseDir c;
      write_file(c.config(), g.config);
      fs::create_symlink(g.weights, c.dir.file("model-00001-of-00001.safetensors"));
      std::string mutated = mutate_json(text, index, rng, what);
      if (i == 0) {  // the unmutated index loads
        mutated = text;
        what += " unmutated";
      }
      write_file(c.dir.file("model.safetensors.index.json"), mutated);
      loaded += expect_clean_outcome(c, what);
    }
    report("index", arch, kIndexCases, loaded);
  }
}

// ---- regression cases (issue 20) ----

using Clock = std::chrono::steady_clock;

/// A case folder with the golden weights linked and `edit` applied to the golden config.
std::unique_ptr<CaseDir> edited_config(const char* arch, const std::function<void(json&)>& edit) {
  auto c = std::make_unique<CaseDir>();
  json j = json::parse(golden(arch).config);
  edit(j);
  write_file(c->config(), j.dump(1));
  c->link_weights(golden(arch));
  return c;
}

TEST(ModelFuzzRegressionTest, DeepNestingIsAnErrorNotAStackOverflow) {
  for (const char* arch : kArchs) {
    SCOPED_TRACE(arch);
    const Golden& g = golden(arch);
    CaseDir config;
    json j = json::parse(g.config);
    write_file(config.config(), with_deep_value(j, json::json_pointer("/num_hidden_layers")));
    config.link_weights(g);
    EXPECT_ERROR_CONTAINS(load_model(config.dir.path()).status(),
                          config.config() +
                              ": field 'num_hidden_layers' nests arrays or objects "
                              "deeper than 64 levels");
    CaseDir header;
    write_file(header.config(), g.config);
    json h = g.header;
    h["model.norm.weight"]["shape"] = "@@deep@@";
    std::string text = h.dump();
    text.replace(text.find("\"@@deep@@\""), 10, deep_array());
    write_file(header.weights(), safetensors_bytes(text, g.data));
    EXPECT_ERROR_CONTAINS(load_model(header.dir.path()).status(),
                          header.weights() +
                              ": header: field 'model.norm.weight.shape' nests "
                              "arrays or objects deeper than 64 levels");
  }
}

TEST(ModelFuzzRegressionTest, DivisorsOfZeroAreErrors) {
  auto sparse = edited_config("qwen3_next", [](json& j) { j["decoder_sparse_step"] = 0; });
  EXPECT_ERROR_CONTAINS(load_model(sparse->dir.path()).status(),
                        sparse->config() +
                            ": field 'decoder_sparse_step' is 0, expected an "
                            "integer in [1, 4096]");
  for (const char* arch : {"qwen3_next", "qwen3_5", "qwen3_5_moe"}) {
    SCOPED_TRACE(arch);
    auto interval = edited_config(arch, [](json& j) {
      j.erase("layer_types");
      j["full_attention_interval"] = 0;
    });
    EXPECT_ERROR_CONTAINS(load_model(interval->dir.path()).status(),
                          interval->config() +
                              ": field 'full_attention_interval' is 0, expected "
                              "an integer in [1, 4096]");
  }
  auto freq = edited_config("kimi_linear", [](json& j) {
    j.erase("mlp_layer_types");
    j["moe_layer_freq"] = 0;
  });
  EXPECT_ERROR_CONTAINS(load_model(freq->dir.path()).status(),
                        freq->config() +
                            ": field 'moe_layer_freq' is 0, expected an integer in "
                            "[1, 4096]");
}

TEST(ModelFuzzRegressionTest, BillionLayersOrExpertsFailFast) {
  struct Case {
    const char* arch;
    const char* field;
    const char* holds;
  };
  for (const Case& c : {Case{"qwen3_next", "num_hidden_layers", "holds 4 (model.layers.0"},
                        Case{"kimi_k3", "num_hidden_layers", "holds 7 (model.layers.0"},
                        Case{"qwen3_5_moe", "num_experts", "holds at most 4 experts per layer"},
                        Case{"kimi_linear", "n_routed_experts", "holds at most 4 experts"}}) {
    SCOPED_TRACE(str_cat(c.arch, " ", c.field));
    auto dir = edited_config(c.arch, [&](json& j) {
      j.erase("layer_types");
      j.erase("mlp_layer_types");
      j[c.field] = 1'000'000'000;
    });
    const Clock::time_point start = Clock::now();
    const Status s = load_model(dir->dir.path()).status();
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
    EXPECT_ERROR_CONTAINS(s, dir->config() + ": " + c.field + " is 1000000000 but the checkpoint");
    EXPECT_ERROR_CONTAINS(s, c.holds);
  }
}

TEST(ModelFuzzRegressionTest, TensorsTheConfigNeverReadsAreErrors) {
  auto fewer = edited_config("qwen3_next", [](json& j) {
    j["num_hidden_layers"] = 3;
    j["layer_types"] = {"linear_attention", "linear_attention", "linear_attention"};
  });
  const Status layers = load_model(fewer->dir.path()).status();
  EXPECT_ERROR_CONTAINS(layers, "holds 25 tensor(s) that the config never reads");
  EXPECT_ERROR_CONTAINS(layers, "'model.layers.3.");
  auto no_shared =
      edited_config("qwen3_5_moe", [](json& j) { j["shared_expert_intermediate_size"] = 0; });
  EXPECT_ERROR_CONTAINS(load_model(no_shared->dir.path()).status(),
                        "'model.layers.0.mlp.shared_expert.down_proj.weight'");
  auto kimi_no_shared = edited_config("kimi_linear", [](json& j) { j["num_shared_experts"] = 0; });
  EXPECT_ERROR_CONTAINS(load_model(kimi_no_shared->dir.path()).status(),
                        "'model.layers.1.block_sparse_moe.shared_experts.down_proj.weight'");
}

}  // namespace
}  // namespace hyla::model
