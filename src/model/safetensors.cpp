// safetensors reader (mmap + header validation) and writer (see safetensors.h).
#include "model/safetensors.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>  // the header is JSON
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>

#include "model/json_file.h"

namespace hyla::model {

namespace {

using nlohmann::json;

// The dtype strings of the format and the DType each reads as, in the order messages list them.
struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypeNames[] = {
    {"F32", DType::kF32}, {"BF16", DType::kBF16}, {"F16", DType::kF16}, {"F64", DType::kF64},
    {"I64", DType::kI64}, {"I32", DType::kI32},   {"I8", DType::kI8},   {"U8", DType::kU8},
};

std::string supported_dtype_list() {
  std::string s;
  for (const DTypeName& d : kDTypeNames) s += str_cat(s.empty() ? "" : ", ", d.name);
  return s;
}

std::string format_shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += str_cat(d ? ", " : "", shape[d]);
  return s + "]";
}

Status io_error(const std::string& what, const std::string& path, int err) {
  return Status(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo,
                str_cat(what, " '", path, "': ", std::strerror(err)));
}

// Byte range of one tensor inside the data section.
struct ByteRange {
  uint64_t begin;
  uint64_t end;
  size_t tensor;  // position in the tensor list
};

// Parses one header entry {dtype, shape, data_offsets} of tensor `name` into `entry` and `range`.
// `data_bytes` is the size of the data section.
Status parse_entry(const std::string& path, const std::string& stored_name, const json& value,
                   uint64_t data_bytes, TensorEntry* entry, ByteRange* range) {
  const std::string name = text_excerpt(stored_name);  // for messages
  if (!value.is_object())
    return invalid_argument(path, ": tensor '", name, "': header entry is not a JSON object");

  const auto dtype_it = value.find("dtype");
  if (dtype_it == value.end() || !dtype_it->is_string())
    return invalid_argument(path, ": tensor '", name, "' has no \"dtype\" string");
  const std::string& dtype = dtype_it->get_ref<const std::string&>();
  if (!parse_safetensors_dtype(dtype, &entry->dtype))
    return unsupported(path, ": tensor '", name, "' has dtype '", text_excerpt(dtype),
                       "', supported: ", supported_dtype_list());

  const auto shape_it = value.find("shape");
  if (shape_it == value.end() || !shape_it->is_array())
    return invalid_argument(path, ": tensor '", name, "' has no \"shape\" array");
  if (shape_it->size() > size_t(kMaxDims))
    return unsupported(path, ": tensor '", name, "' has ", shape_it->size(), " dims, at most ",
                       kMaxDims, " are supported");
  int64_t numel = 1;
  for (const json& dim : *shape_it) {
    if (!dim.is_number_integer())
      return invalid_argument(path, ": tensor '", name, "' has a non-integer dim in shape ",
                              json_excerpt(*shape_it));
    if (!dim.is_number_unsigned())  // nlohmann parses every non-negative integer as unsigned
      return invalid_argument(path, ": tensor '", name, "' has a negative dim in shape ",
                              json_excerpt(*shape_it));
    const uint64_t size = dim.get<uint64_t>();
    // Every real dim is far below 2^62 bytes; a bigger product cannot fit the file anyway.
    constexpr uint64_t kMaxElements = uint64_t{1} << 56;
    if (size > kMaxElements || (size != 0 && uint64_t(numel) > kMaxElements / size))
      return invalid_argument(path, ": tensor '", name, "' has shape ", json_excerpt(*shape_it),
                              ", too large for any file");
    entry->shape.push_back(int64_t(size));
    numel *= int64_t(size);
  }

  const auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned() ||
      (*offsets_it)[0].get<uint64_t>() > (*offsets_it)[1].get<uint64_t>()) {
    return invalid_argument(path, ": tensor '", name,
                            "' needs \"data_offsets\": [begin, end] with 0 <= begin <= end, got ",
                            offsets_it == value.end() ? "none" : json_excerpt(*offsets_it));
  }
  range->begin = (*offsets_it)[0].get<uint64_t>();
  range->end = (*offsets_it)[1].get<uint64_t>();
  if (range->end > data_bytes)
    return invalid_argument(path, ": tensor '", name, "' needs bytes [", range->begin, ", ",
                            range->end, ") of the data section but the file has only ", data_bytes,
                            " (truncated file?)");
  const int64_t nbytes = int64_t(range->end - range->begin);
  const int64_t expected = numel * dtype_size(entry->dtype);
  if (nbytes != expected)
    return invalid_argument(path, ": tensor '", name, "' has ", nbytes, " bytes (data_offsets [",
                            range->begin, ", ", range->end, ")), but shape ",
                            format_shape(entry->shape), " of ", dtype, " needs ", expected);
  entry->name = stored_name;
  entry->nbytes = nbytes;
  entry->file = path;
  return ok_status();
}

// Tensors may leave gaps but must not share bytes. Empty tensors overlap nothing.
Status check_no_overlap(const std::string& path, const std::vector<TensorEntry>& tensors,
                        std::vector<ByteRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const ByteRange* furthest = nullptr;  // the non-empty range seen so far that ends last
  for (const ByteRange& r : ranges) {
    if (r.begin == r.end) continue;
    if (furthest != nullptr && r.begin < furthest->end)
      return invalid_argument(path, ": tensors '", text_excerpt(tensors[furthest->tensor].name),
                              "' (bytes [", furthest->begin, ", ", furthest->end, ")) and '",
                              text_excerpt(tensors[r.tensor].name), "' (bytes [", r.begin, ", ",
                              r.end, ")) overlap in the data section");
    if (furthest == nullptr || r.end > furthest->end) furthest = &r;
  }
  return ok_status();
}

// Validates the header of a mapped file of `file_bytes` bytes (at least 8) and fills the entries,
// sorted by name, and the metadata.
Status parse_header(const std::string& path, const unsigned char* bytes, uint64_t file_bytes,
                    std::vector<TensorEntry>* tensors, std::map<std::string, std::string>* meta) {
  uint64_t header_bytes = 0;
  for (int b = 7; b >= 0; --b) header_bytes = (header_bytes << 8) | bytes[b];  // little-endian
  if (header_bytes > file_bytes - 8)
    return invalid_argument(path, ": header length ", header_bytes, " exceeds the file size (",
                            file_bytes, " bytes): not a safetensors file, or a truncated one");
  const unsigned char* header_begin = bytes + 8;
  const unsigned char* data = header_begin + header_bytes;
  const uint64_t data_bytes = file_bytes - 8 - header_bytes;

  const std::string_view text(reinterpret_cast<const char*>(header_begin), size_t(header_bytes));
  HYLA_RETURN_IF_ERROR(check_json_depth(text, str_cat(path, ": header")));
  json header;
  try {
    header = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return invalid_argument(path, ": the ", header_bytes,
                            "-byte header is not valid JSON: ", json_parse_error_message(e));
  }
  if (!header.is_object())
    return invalid_argument(path, ": the header is JSON but not an object: ", json_excerpt(header));

  std::vector<ByteRange> ranges;
  for (const auto& [name, value] : header.items()) {  // sorted by name (nlohmann::json is a map)
    if (name == "__metadata__") {
      if (!value.is_object())
        return invalid_argument(path, ": \"__metadata__\" is not a JSON object");
      for (const auto& [key, entry] : value.items()) {
        if (!entry.is_string())
          return invalid_argument(path, ": \"__metadata__\" value of '", text_excerpt(key),
                                  "' is not a string: ", json_excerpt(entry));
        (*meta)[key] = entry.get<std::string>();
      }
      continue;
    }
    TensorEntry entry;
    ByteRange range{};
    HYLA_RETURN_IF_ERROR(parse_entry(path, name, value, data_bytes, &entry, &range));
    entry.data = data + range.begin;
    range.tensor = tensors->size();
    tensors->push_back(std::move(entry));
    ranges.push_back(range);
  }
  return check_no_overlap(path, *tensors, std::move(ranges));
}

}  // namespace

bool parse_safetensors_dtype(std::string_view name, DType* dtype) {
  for (const DTypeName& d : kDTypeNames) {
    if (name == d.name) {
      *dtype = d.dtype;
      return true;
    }
  }
  return false;
}

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kDTypeNames)
    if (d.dtype == dtype) return d.name;
  return "?";
}

int64_t TensorEntry::numel() const {
  int64_t n = 1;
  for (int64_t size : shape) n *= size;
  return n;
}

std::string TensorEntry::shape_string() const { return format_shape(shape); }

TensorView TensorEntry::view() const {
  int64_t stride[kMaxDims];
  int64_t s = 1;
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    stride[d] = s;
    s *= shape[d];
  }
  // The mapping is read-only; TensorView has no const flavour.
  return TensorView(const_cast<void*>(data), dtype, int(shape.size()), shape.data(), stride,
                    Device::cpu());
}

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open safetensors file", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return io_error("cannot stat safetensors file", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path, ": not a regular file");
  }
  const uint64_t file_bytes = uint64_t(st.st_size);
  if (file_bytes < 8) {
    ::close(fd);
    return invalid_argument(path, ": the file has ", file_bytes,
                            " bytes, too short for the 8-byte header length of a safetensors file");
  }
  void* mapping = ::mmap(nullptr, size_t(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (mapping == MAP_FAILED) return io_error("cannot mmap safetensors file", path, map_err);

  SafetensorsFile file;
  file.path_ = path;
  file.mapping_ = mapping;
  file.mapping_bytes_ = size_t(file_bytes);
  HYLA_RETURN_IF_ERROR(parse_header(path, static_cast<const unsigned char*>(mapping), file_bytes,
                                    &file.tensors_, &file.metadata_));
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept { *this = std::move(other); }

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    tensors_ = std::move(other.tensors_);  // entries point into the mapping, which stays put
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  mapping_bytes_ = 0;
}

const TensorEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it = std::lower_bound(
      tensors_.begin(), tensors_.end(), name,
      [](const TensorEntry& e, std::string_view key) { return std::string_view(e.name) < key; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

Status write_safetensors(const std::string& path,
                         const std::vector<std::pair<std::string, TensorView>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, view] : tensors) {
    if (name == "__metadata__" || header.contains(name))
      return invalid_argument("write_safetensors ", path, ": tensor name '", name,
                              name == "__metadata__" ? "' is reserved" : "' appears twice");
    if (view.numel() != 0 && (!view.defined() || !view.device().is_cpu() || !view.is_contiguous()))
      return invalid_argument("write_safetensors ", path, ": tensor '", name,
                              "' must be a defined, contiguous host view, got ", view.to_string());
    const uint64_t nbytes = uint64_t(view.numel() * dtype_size(view.dtype()));
    header[name] = {{"dtype", std::string(safetensors_dtype_name(view.dtype()))},
                    {"shape", std::vector<int64_t>(view.shape(), view.shape() + view.ndim())},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // e.g. a name that is not UTF-8
    return invalid_argument("write_safetensors ", path, ": ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error("write_safetensors: cannot create", path, errno);
  unsigned char length[8];
  for (int b = 0; b < 8; ++b) length[b] = static_cast<unsigned char>(text.size() >> (8 * b));
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& [name, view] : tensors) {
    if (view.numel() == 0) continue;
    out.write(static_cast<const char*>(view.raw()),
              std::streamsize(view.numel() * dtype_size(view.dtype())));
  }
  out.close();
  if (!out) return io_error("write_safetensors: cannot write", path, errno);
  return ok_status();
}

}  // namespace hyla::model
