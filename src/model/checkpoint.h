// A Hugging Face checkpoint: model.safetensors, or model.safetensors.index.json with its shards,
// opened (memory-mapped) once; tensors are looked up by name and copied into owned host tensors
// of the dtype a layer wants.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"  // kAnyDim
#include "core/error.h"
#include "core/tensor.h"
#include "model/safetensors.h"

namespace hyla::model {

/// Multimodal checkpoints (decoder under model.language_model. or language_model.model.) also
/// answer to the text-only names (model.layers..., lm_head.weight).
class Checkpoint {
 public:
  /// `path` is a checkpoint folder holding model.safetensors or model.safetensors.index.json
  /// (HF's order: the single file wins when both exist), or a single .safetensors file.
  /// Errors: nothing to open; a shard the index names is missing; a tensor the index lists is not
  /// in its shard; a tensor in two shards; any error of SafetensorsFile::open.
  static Result<Checkpoint> open(const std::string& path);

  /// The folder holding the checkpoint (for a single file: the folder it is in).
  const std::string& dir() const { return dir_; }
  /// The path open() was given; messages name it.
  const std::string& source() const { return source_; }
  /// The opened files (one, or every shard in file name order).
  const std::vector<SafetensorsFile>& files() const { return files_; }
  int64_t size() const { return int64_t(entries_.size()); }

  /// nullptr when absent.
  const TensorEntry* find(std::string_view name) const;
  /// Every tensor name, sorted.
  std::vector<std::string> names() const;
  /// True when some tensor is stored under a multimodal wrapper's text-decoder prefix
  /// (is_text_decoder_name): the checkpoint then also holds other towers (vision), outside it.
  bool wraps_text_decoder() const { return wraps_text_decoder_; }
  /// True for a stored name under a wrapper's text-decoder prefix (model.language_model.,
  /// language_model.).
  static bool is_text_decoder_name(std::string_view stored_name);
  /// Up to `count` names closest to `name` by edit distance, closest first (for messages).
  std::vector<std::string> similar_names(std::string_view name, size_t count = 3) const;

  /// Ok when `name` exists with `expected_shape` (kAnyDim matches any size). Errors:
  /// "missing tensor 'x' in <source> (107 tensors; similar: 'a', 'b', 'c')" (kNotFound) and
  /// "tensor 'x' has shape [a, b], expected [c, d] (in <file>)".
  Status check(std::string_view name, std::span<const int64_t> expected_shape) const;

  /// Copies tensor `name` into an owned host tensor of `dtype`, after check(name, expected_shape).
  /// Conversions: F32/BF16/F16/F64 in -> F32/BF16/F16 out (round to nearest even); any dtype
  /// loads as itself (I64 token ids as kI64).
  Result<Tensor> load(std::string_view name, std::initializer_list<int64_t> expected_shape,
                      DType dtype = DType::kF32) const;
  Result<Tensor> load(std::string_view name, std::span<const int64_t> expected_shape,
                      DType dtype = DType::kF32) const;
  /// load() without a shape check (only that the tensor exists).
  Result<Tensor> load_any_shape(std::string_view name, DType dtype = DType::kF32) const;

 private:
  Checkpoint() = default;
  Status open_index(const std::string& index_path);
  Status index_tensors();
  /// The missing-tensor error, with the closest names.
  Status missing(std::string_view name) const;

  std::string dir_;
  std::string source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, const TensorEntry*, std::less<>> entries_;  // into files_' entries
  bool wraps_text_decoder_ = false;
};

/// What a checkpoint holds, counted from its tensor names (text-decoder names, wrappers resolved),
/// so that a config can be compared with it before anything proportional to the config is built.
struct CheckpointHoldings {
  int64_t layers = 0;   ///< 1 + the highest i of model.layers.{i}.*; 0 when there are none
  int64_t experts = 0;  ///< 1 + the highest e of model.layers.{i}.*.experts.{e}.*; 0 when none
};
CheckpointHoldings checkpoint_holdings(const Checkpoint& ckpt);

}  // namespace hyla::model
