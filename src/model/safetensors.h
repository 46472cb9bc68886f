// The safetensors format (huggingface/safetensors): an 8-byte little-endian header length N, N
// bytes of JSON {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}},
// then the data section; offsets are relative to the start of the data section.
// SafetensorsFile memory-maps a file read-only and validates the whole header when it opens it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace hyla::model {

/// One tensor of a safetensors file. `data` points into the read-only mapping of `file`, so the
/// entry lives as long as the SafetensorsFile holding it. The data is aligned as the file aligns it
/// (the Hugging Face writer aligns every tensor to its element size).
struct TensorEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  int64_t nbytes = 0;
  std::string file;  ///< path of the file it came from

  int64_t numel() const;
  /// "[512, 128]"
  std::string shape_string() const;
  /// A contiguous CPU view of the mapped bytes; read-only (writing through it faults).
  TensorView view() const;
};

/// "F32" -> DType::kF32 etc.; false for a dtype Hyla does not read (F8_E4M3, BOOL, ...).
bool parse_safetensors_dtype(std::string_view name, DType* dtype);
/// DType::kBF16 -> "BF16"
std::string_view safetensors_dtype_name(DType dtype);

/// An open safetensors file. Move-only: it owns the mapping, which is unmapped on destruction.
class SafetensorsFile {
 public:
  /// Maps `path` and validates its header: the header length, the JSON, every dtype, shape and
  /// data range (inside the data section, nbytes == numel * element size, no overlaps).
  static Result<SafetensorsFile> open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  /// Sorted by name.
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  /// nullptr when absent.
  const TensorEntry* find(std::string_view name) const;
  /// The header's "__metadata__" (empty when it has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  void unmap();

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

/// Writes `tensors` (contiguous host views, any DType) in the given order, with `metadata` as
/// "__metadata__". The header is padded with spaces to a multiple of 8 bytes, so the data section
/// starts 8-byte aligned. For tests and tools.
Status write_safetensors(const std::string& path,
                         const std::vector<std::pair<std::string, TensorView>>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace hyla::model
