// safetensors.h: write -> read round trips for every dtype, the golden HF files, and one clear
// error per kind of broken file.
#include "model/safetensors.h"

#include <nlohmann/json.hpp>  // builds broken headers, reads reference_meta.json

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "model/json_file.h"
#include "test_files.h"
#include "testing.h"

namespace hyla::model {
namespace {

using hyla::testing::golden_dir;
using hyla::testing::TempDir;
using nlohmann::json;

constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                DType::kI32, DType::kI64, DType::kI8,   DType::kU8};

// A host tensor of `shape` whose bytes are a seeded pseudo-random pattern (any dtype; floats may
// hold NaN patterns, which is fine: round trips compare bytes).
Tensor random_bytes(std::initializer_list<int64_t> shape, DType dtype, std::mt19937& rng) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.view().raw());
  for (int64_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(rng());
  return t;
}

// Writes a file by hand: 8-byte length (header.size() unless `header_length` is given), header,
// then `data_bytes` bytes of data.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes,
               uint64_t header_length = ~uint64_t{0}) {
  if (header_length == ~uint64_t{0}) header_length = header.size();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (int b = 0; b < 8; ++b) out.put(static_cast<char>((header_length >> (8 * b)) & 0xff));
  out << header << std::string(data_bytes, '\0');
}

// The status of opening a file whose header is `header` with `data_bytes` of data.
Status open_raw(const TempDir& dir, const json& header, size_t data_bytes) {
  const std::string path = dir.file("raw.safetensors");
  write_raw(path, header.dump(), data_bytes);
  return SafetensorsFile::open(path).status();
}

TEST(SafetensorsTest, RoundTripEveryDtype) {
  TempDir dir;
  std::mt19937 rng(7);
  std::vector<Tensor> tensors;
  std::vector<std::pair<std::string, TensorView>> named;
  for (DType dtype : kAllDTypes) {
    tensors.push_back(random_bytes({3, 5}, dtype, rng));
    named.emplace_back(str_cat("w.", dtype_name(dtype)), tensors.back());
  }
  tensors.push_back(random_bytes({}, DType::kF32, rng));  // a scalar
  named.emplace_back("scalar", tensors.back());
  tensors.push_back(random_bytes({2, 1, 3, 1, 2, 2}, DType::kBF16, rng));  // kMaxDims dims
  named.emplace_back("six_dims", tensors.back());
  tensors.push_back(Tensor::empty({0, 4}, DType::kF16));  // no elements, no bytes
  named.emplace_back("empty", tensors.back());
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"seed", "7"}};
  const std::string path = dir.file("round_trip.safetensors");
  ASSERT_OK(write_safetensors(path, named, metadata));

  // The header is padded to a multiple of 8 bytes, so the data section starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  unsigned char length[8];
  in.read(reinterpret_cast<char*>(length), 8);
  EXPECT_EQ(length[0] % 8, 0);

  Result<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_OK(file.status());
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->metadata(), metadata);
  ASSERT_EQ(file->tensors().size(), named.size());
  for (const auto& [name, want] : named) {
    SCOPED_TRACE(name);
    const TensorEntry* got = file->find(name);
    ASSERT_NE(got, nullptr);
    EXPECT_EQ(got->name, name);
    EXPECT_EQ(got->file, path);
    EXPECT_EQ(got->dtype, want.dtype());
    EXPECT_EQ(got->shape, std::vector<int64_t>(want.shape(), want.shape() + want.ndim()));
    EXPECT_EQ(got->nbytes, want.numel() * dtype_size(want.dtype()));
    EXPECT_EQ(std::memcmp(got->data, want.raw(), size_t(got->nbytes)), 0);
    const TensorView view = got->view();
    EXPECT_EQ(view.shape_string(), want.shape_string());
    EXPECT_TRUE(view.is_contiguous());
    EXPECT_TRUE(view.device().is_cpu());
  }
  EXPECT_EQ(file->find("w.f32")->shape_string(), "[3, 5]");
  EXPECT_EQ(file->find("absent"), nullptr);
}

TEST(SafetensorsTest, ValuesSurviveARoundTrip) {
  TempDir dir;
  std::mt19937 rng(11);
  const Tensor bf = testing::random_normal({4, 6}, DType::kBF16, rng);
  const Tensor f = testing::random_uniform({7}, DType::kF32, rng);
  const std::string path = dir.file("values.safetensors");
  ASSERT_OK(write_safetensors(path, {{"bf", bf}, {"f", f}}));
  Result<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_OK(file.status());
  EXPECT_CLOSE(file->find("bf")->view(), bf, {.atol = 0, .rtol = 0, .why = "bytes copied"});
  EXPECT_CLOSE(file->find("f")->view(), f, {.atol = 0, .rtol = 0, .why = "bytes copied"});
  EXPECT_TRUE(file->metadata().empty());
}

TEST(SafetensorsTest, MovedFileKeepsItsEntries) {
  TempDir dir;
  const Tensor t = testing::tensor_from({1, 2, 3}, {3}, DType::kF32);
  ASSERT_OK(write_safetensors(dir.file("m.safetensors"), {{"t", t}}));
  Result<SafetensorsFile> opened = SafetensorsFile::open(dir.file("m.safetensors"));
  ASSERT_OK(opened.status());
  SafetensorsFile file = std::move(opened).value();
  SafetensorsFile other = std::move(file);
  ASSERT_NE(other.find("t"), nullptr);
  EXPECT_CLOSE(other.find("t")->view(), std::vector<double>{1, 2, 3},
               {.atol = 0, .rtol = 0, .why = "bytes copied"});
}

TEST(SafetensorsTest, DtypeNames) {
  for (DType dtype : kAllDTypes) {
    DType parsed = DType::kU8;
    EXPECT_TRUE(parse_safetensors_dtype(safetensors_dtype_name(dtype), &parsed));
    EXPECT_EQ(parsed, dtype);
  }
  DType unused = DType::kF32;
  EXPECT_FALSE(parse_safetensors_dtype("F8_E4M3", &unused));
  EXPECT_FALSE(parse_safetensors_dtype("f32", &unused));
  EXPECT_EQ(safetensors_dtype_name(DType::kBF16), "BF16");
}

// Every tensor reference_meta.json lists for model.safetensors is there, with its shape and dtype.
TEST(SafetensorsTest, ReadsTheGoldenQwen3NextCheckpoint) {
  const std::string arch_dir = golden_dir() + "/qwen3_next";
  Result<SafetensorsFile> file = SafetensorsFile::open(arch_dir + "/model.safetensors");
  ASSERT_OK(file.status());
  Result<json> meta = read_json_file(arch_dir + "/reference_meta.json");
  ASSERT_OK(meta.status());
  const json& keys = meta.value()["weights_file_keys"];
  ASSERT_TRUE(keys.is_object());
  EXPECT_EQ(file->tensors().size(), keys.size());
  for (const auto& [name, spec] : keys.items()) {
    SCOPED_TRACE(name);
    const TensorEntry* entry = file->find(name);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->shape, spec["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(safetensors_dtype_name(entry->dtype), spec["dtype"].get<std::string>());
  }
  const TensorEntry* embed = file->find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->dtype, DType::kF32);
  EXPECT_EQ(embed->shape, keys["model.embed_tokens.weight"]["shape"].get<std::vector<int64_t>>());
  EXPECT_EQ(file->metadata().at("format"), "pt");
}

// Every golden file opens, the references (which hold int64 token ids) included. The MTP sets
// (<arch>_mtp, derived by tools/make_mtp_model.py) hold a model and no reference.
TEST(SafetensorsTest, OpensEveryGoldenFile) {
  const std::string roots[] = {golden_dir()};
  int files = 0;
  for (const std::string& root : roots) {
    for (const auto& arch : std::filesystem::directory_iterator(root)) {
      if (!arch.is_directory()) continue;
      const bool derived = arch.path().filename().string().ends_with("_mtp");
      for (const char* name : {"model.safetensors", "reference.safetensors"}) {
        if (derived && std::string_view(name) == "reference.safetensors") continue;
        const std::string path = (arch.path() / name).string();
        SCOPED_TRACE(path);
        Result<SafetensorsFile> file = SafetensorsFile::open(path);
        ASSERT_OK(file.status());
        EXPECT_FALSE(file->tensors().empty());
        ++files;
      }
    }
  }
  EXPECT_GE(files, 10);
}

// ---- broken files: one clear error each ----

TEST(SafetensorsErrorTest, MissingFile) {
  TempDir dir;
  const Status s = SafetensorsFile::open(dir.file("nope.safetensors")).status();
  EXPECT_ERROR_CONTAINS(s, "cannot open safetensors file '" + dir.file("nope.safetensors"));
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
}

TEST(SafetensorsErrorTest, FileShorterThanTheHeaderLength) {
  TempDir dir;
  const std::string path = dir.file("short.safetensors");
  std::ofstream(path) << "abc";
  EXPECT_ERROR_CONTAINS(SafetensorsFile::open(path).status(),
                        "short.safetensors: the file has 3 bytes, too short");
}

TEST(SafetensorsErrorTest, HeaderLengthLargerThanTheFile) {
  TempDir dir;
  const std::string path = dir.file("long_header.safetensors");
  write_raw(path, "{}", 0, /*header_length=*/1000000);
  EXPECT_ERROR_CONTAINS(SafetensorsFile::open(path).status(),
                        "long_header.safetensors: header length 1000000 exceeds the file size "
                        "(10 bytes)");
}

TEST(SafetensorsErrorTest, GarbageJson) {
  TempDir dir;
  const std::string path = dir.file("garbage.safetensors");
  write_raw(path, "{\"w\": {\"dtype\": \"F32\", oops", 16);
  const Status s = SafetensorsFile::open(path).status();
  EXPECT_ERROR_CONTAINS(s, "garbage.safetensors: the 27-byte header is not valid JSON");
  EXPECT_ERROR_CONTAINS(s, "parse error");
}

TEST(SafetensorsErrorTest, HeaderNotAnObject) {
  TempDir dir;
  EXPECT_ERROR_CONTAINS(open_raw(dir, json::array({1, 2}), 0),
                        "the header is JSON but not an object");
}

TEST(SafetensorsErrorTest, UnknownDtype) {
  TempDir dir;
  const json header = {{"x", {{"dtype", "F8_E4M3"}, {"shape", {4}}, {"data_offsets", {0, 4}}}}};
  const Status s = open_raw(dir, header, 4);
  EXPECT_ERROR_CONTAINS(s, "tensor 'x' has dtype 'F8_E4M3', supported: F32, BF16, F16, F64, I64");
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
}

TEST(SafetensorsErrorTest, TruncatedFile) {
  TempDir dir;
  const std::string path = dir.file("truncated.safetensors");
  const Tensor embed = Tensor::zeros({4, 8}, DType::kF32);
  const Tensor norm = Tensor::zeros({8}, DType::kF32);
  ASSERT_OK(
      write_safetensors(path, {{"model.embed_tokens.weight", embed}, {"model.norm.weight", norm}}));
  ASSERT_OK(SafetensorsFile::open(path).status());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);
  EXPECT_ERROR_CONTAINS(SafetensorsFile::open(path).status(),
                        "truncated.safetensors: tensor 'model.norm.weight' needs bytes [128, 160) "
                        "of the data section but the file has only 157");
}

TEST(SafetensorsErrorTest, OffsetsOutOfRange) {
  TempDir dir;
  const json header = {{"w", {{"dtype", "F32"}, {"shape", {25}}, {"data_offsets", {0, 100}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, header, 16),
                        "tensor 'w' needs bytes [0, 100) of the data section but the file has "
                        "only 16");
  const json backwards = {{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {8, 4}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, backwards, 16),
                        "tensor 'w' needs \"data_offsets\": [begin, end] with 0 <= begin <= end, "
                        "got [8,4]");
  const json negative = {{"w", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {-4, 0}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, negative, 16), "got [-4,0]");
  const json missing = {{"w", {{"dtype", "F32"}, {"shape", {1}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, missing, 16), "got none");
}

TEST(SafetensorsErrorTest, NbytesMismatch) {
  TempDir dir;
  const json header = {{"w", {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 12}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, header, 16),
                        "tensor 'w' has 12 bytes (data_offsets [0, 12)), but shape [2, 2] of F32 "
                        "needs 16");
}

TEST(SafetensorsErrorTest, OverlappingTensors) {
  TempDir dir;
  const json header = {{"a", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {0, 8}}}},
                       {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {4, 12}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, header, 16),
                        "tensors 'a' (bytes [0, 8)) and 'b' (bytes [4, 12)) overlap");
  // One tensor inside another that ends later.
  const json nested = {{"a", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
                       {"b", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {4, 8}}}},
                       {"c", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {8, 12}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, nested, 16), "overlap");
}

TEST(SafetensorsErrorTest, GapsAndEmptyTensorsAreNotOverlaps) {
  TempDir dir;
  const json header = {{"a", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {0, 4}}}},
                       {"e", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {4, 4}}}},
                       {"b", {{"dtype", "F32"}, {"shape", {1}}, {"data_offsets", {8, 12}}}}};
  EXPECT_OK(open_raw(dir, header, 16));
}

TEST(SafetensorsErrorTest, BadShapes) {
  TempDir dir;
  const json negative = {{"w", {{"dtype", "F32"}, {"shape", {-1, 2}}, {"data_offsets", {0, 8}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, negative, 8),
                        "tensor 'w' has a negative dim in shape [-1,2]");
  const json fractional = {{"w", {{"dtype", "F32"}, {"shape", {1.5}}, {"data_offsets", {0, 4}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, fractional, 8), "tensor 'w' has a non-integer dim");
  const json seven = {
      {"w", {{"dtype", "F32"}, {"shape", {1, 1, 1, 1, 1, 1, 1}}, {"data_offsets", {0, 4}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, seven, 8), "tensor 'w' has 7 dims, at most 6");
  const json huge = {{"w",
                      {{"dtype", "F32"},
                       {"shape", {uint64_t{1} << 40, uint64_t{1} << 40}},
                       {"data_offsets", {0, 4}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, huge, 8), "too large");
  const json no_shape = {{"w", {{"dtype", "F32"}, {"data_offsets", {0, 4}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, no_shape, 8), "tensor 'w' has no \"shape\" array");
  const json no_dtype = {{"w", {{"shape", {1}}, {"data_offsets", {0, 4}}}}};
  EXPECT_ERROR_CONTAINS(open_raw(dir, no_dtype, 8), "tensor 'w' has no \"dtype\" string");
  EXPECT_ERROR_CONTAINS(open_raw(dir, {{"w", 3}}, 8), "tensor 'w': header entry is not a JSON");
}

TEST(SafetensorsErrorTest, BadMetadata) {
  TempDir dir;
  EXPECT_ERROR_CONTAINS(open_raw(dir, {{"__metadata__", {{"epoch", 3}}}}, 0),
                        "\"__metadata__\" value of 'epoch' is not a string: 3");
  EXPECT_ERROR_CONTAINS(open_raw(dir, {{"__metadata__", "pt"}}, 0),
                        "\"__metadata__\" is not a JSON object");
}

TEST(SafetensorsErrorTest, WriterRejectsBadInput) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const Tensor t = Tensor::zeros({4, 6}, DType::kF32);
  EXPECT_ERROR_CONTAINS(write_safetensors(path, {{"a", t}, {"a", t}}), "'a' appears twice");
  EXPECT_ERROR_CONTAINS(write_safetensors(path, {{"__metadata__", t}}), "is reserved");
  const TensorView row = t.view().select(0);  // contiguous
  EXPECT_OK(write_safetensors(path, {{"row", row}}));
  const int64_t shape[] = {4};
  const int64_t stride[] = {6};
  const TensorView strided(t.view().raw(), DType::kF32, 1, shape, stride);
  EXPECT_ERROR_CONTAINS(write_safetensors(path, {{"strided", strided}}),
                        "tensor 'strided' must be a defined, contiguous host view, got [4] f32");
  EXPECT_ERROR_CONTAINS(write_safetensors(dir.file("no/such/dir.safetensors"), {{"a", t}}),
                        "write_safetensors: cannot create");
}

}  // namespace
}  // namespace hyla::model
