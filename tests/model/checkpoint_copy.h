// A writable copy of a checkpoint folder (config.json, model.safetensors) in a temporary directory,
// for tests that break one thing in it and load it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/json_file.h"
#include "model/safetensors.h"
#include "model/test_files.h"

namespace hyla::testing {

struct CheckpointCopy {
  TempDir dir;

  /// A copy of the golden set `arch`.
  explicit CheckpointCopy(const char* arch = "qwen3_next")
      : CheckpointCopy(Source{golden_dir() + "/" + arch}) {}
  /// A copy of the checkpoint folder `source`.
  static CheckpointCopy of_dir(const std::string& source) { return CheckpointCopy(Source{source}); }

  std::string weights() const { return dir.path() + "/model.safetensors"; }
  std::string config() const { return dir.path() + "/config.json"; }

  /// Rewrites the weights with `edit` applied to the (name, tensor) list.
  template <typename Edit>
  void rewrite_weights(Edit&& edit) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    {
      Result<model::SafetensorsFile> f = model::SafetensorsFile::open(weights());
      HYLA_CHECK(f.ok(), f.status().message());
      for (const model::TensorEntry& e : f->tensors()) {
        Tensor t = Tensor::empty(int(e.shape.size()), e.shape.data(), e.dtype);
        std::memcpy(t.view().raw(), e.data, size_t(e.nbytes));
        tensors.emplace_back(e.name, t);
      }
    }
    edit(tensors);
    std::vector<std::pair<std::string, TensorView>> views;
    for (auto& [name, t] : tensors) views.emplace_back(name, t.view());
    HYLA_CHECK(model::write_safetensors(weights(), views).ok(), "rewrite failed");
  }
  void rewrite_config(const std::function<void(nlohmann::json&)>& edit) {
    Result<nlohmann::json> j = model::read_json_file(config());
    HYLA_CHECK(j.ok(), j.status().message());
    edit(j.value());
    std::ofstream(config()) << j.value().dump(2);
  }

 private:
  struct Source {
    std::string dir;
  };
  explicit CheckpointCopy(const Source& source) {
    namespace fs = std::filesystem;
    for (const char* name : {"config.json", "model.safetensors"}) {
      fs::copy_file(fs::path(source.dir) / name, fs::path(dir.path()) / name);
      fs::permissions(fs::path(dir.path()) / name, fs::perms::owner_write, fs::perm_options::add);
    }
  }
};

}  // namespace hyla::testing
