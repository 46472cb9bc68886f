// Test helpers (see testing.h).
#include "testing.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "model/json_file.h"

namespace hyla::testing {

namespace {

void store_as(const TensorView& t, int64_t i, double x) {
  switch (t.dtype()) {
    case DType::kF32: t.data<float>()[i] = float(x); break;
    case DType::kF64: t.data<double>()[i] = x; break;
    case DType::kBF16: t.data<bf16>()[i] = f32_to_bf16(float(x)); break;
    case DType::kF16: t.data<f16>()[i] = f32_to_f16(float(x)); break;
    case DType::kI32: t.data<int32_t>()[i] = int32_t(x); break;
    default: HYLA_CHECK(false, "store_as: unsupported dtype ", dtype_name(t.dtype()));
  }
}

double load_as(const TensorView& t, int64_t offset) {
  switch (t.dtype()) {
    case DType::kF32: return t.data<float>()[offset];
    case DType::kF64: return t.data<double>()[offset];
    case DType::kBF16: return bf16_to_f32(t.data<bf16>()[offset]);
    case DType::kF16: return f16_to_f32(t.data<f16>()[offset]);
    case DType::kI32: return t.data<int32_t>()[offset];
    case DType::kI64: return double(t.data<int64_t>()[offset]);
    case DType::kI8: return t.data<int8_t>()[offset];
    case DType::kU8: return t.data<uint8_t>()[offset];
  }
  return 0;
}

template <typename Draw>
Tensor random_fill(std::initializer_list<int64_t> shape, DType dtype, Draw draw) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) store_as(t.view(), i, draw());
  return t;
}

}  // namespace

Tensor random_uniform(std::initializer_list<int64_t> shape, DType dtype, std::mt19937& rng,
                      float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  return random_fill(shape, dtype, [&] { return dist(rng); });
}

Tensor random_normal(std::initializer_list<int64_t> shape, DType dtype, std::mt19937& rng,
                     float mean, float stddev) {
  std::normal_distribution<float> dist(mean, stddev);
  return random_fill(shape, dtype, [&] { return dist(rng); });
}

Tensor poisoned(std::initializer_list<int64_t> shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  t.fill_bytes(0xff);
  return t;
}

bool still_poisoned(const TensorView& t) {
  const auto* bytes = static_cast<const uint8_t*>(t.raw());
  return std::all_of(bytes, bytes + t.span_bytes(), [](uint8_t x) { return x == 0xff; });
}

Tensor int32_tensor(const std::vector<int32_t>& values) {
  Tensor t = Tensor::empty({int64_t(values.size())}, DType::kI32);
  for (size_t i = 0; i < values.size(); ++i) t.data<int32_t>()[i] = values[i];
  return t;
}

Tensor tensor_from(const std::vector<double>& values, std::initializer_list<int64_t> shape,
                   DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  HYLA_CHECK(size_t(t.numel()) == values.size(), "tensor_from: ", values.size(), " values for ",
             t.view().shape_string());
  for (size_t i = 0; i < values.size(); ++i) store_as(t.view(), int64_t(i), values[i]);
  return t;
}

std::vector<double> to_f64(const TensorView& t) {
  HYLA_CHECK(t.device().is_cpu(), "to_f64 needs a host tensor");
  std::vector<double> out(size_t(t.numel()));
  std::vector<int64_t> idx(size_t(t.ndim()), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t offset = 0;
    for (int d = 0; d < t.ndim(); ++d) offset += idx[size_t(d)] * t.stride(d);
    out[size_t(i)] = load_as(t, offset);
    for (int d = t.ndim() - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < t.size(d)) break;
      idx[size_t(d)] = 0;
    }
  }
  return out;
}

std::string coords(const TensorView& t, int64_t i) {
  std::vector<int64_t> c(size_t(t.ndim()));
  for (int d = t.ndim() - 1; d >= 0; --d) {
    c[size_t(d)] = i % t.size(d);
    i /= t.size(d);
  }
  std::string s = "[";
  for (size_t d = 0; d < c.size(); ++d) s += (d ? ", " : "") + std::to_string(c[d]);
  return s + "]";
}

::testing::AssertionResult all_close(const TensorView& got, const std::vector<double>& want,
                                     Tolerance tol) {
  const std::vector<double> g = to_f64(got);
  if (g.size() != want.size())
    return ::testing::AssertionFailure()
           << "size mismatch: got " << got.shape_string() << " (" << g.size() << ") vs "
           << want.size() << " expected values";
  int64_t bad = 0;
  double worst = 0;
  std::string first;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(g[i] - want[i]);
    const double limit = tol.atol + tol.rtol * std::fabs(want[i]);
    if (!std::isfinite(g[i]) || !(err <= limit)) {
      if (bad < 5)
        first += "\n  at " + coords(got, int64_t(i)) + ": got " + std::to_string(g[i]) + ", want " +
                 std::to_string(want[i]) + ", |diff| " + std::to_string(err);
      ++bad;
    }
    if (std::isfinite(err)) worst = std::max(worst, err);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << g.size() << " elements outside atol " << tol.atol << " + rtol "
         << tol.rtol << " (" << tol.why << "); max finite |diff| " << worst << first;
}

::testing::AssertionResult all_close(const TensorView& got, const TensorView& want, Tolerance tol) {
  if (got.numel() != want.numel())
    return ::testing::AssertionFailure()
           << "shape mismatch: " << got.shape_string() << " vs " << want.shape_string();
  return all_close(got, to_f64(want), tol);
}

double max_abs_diff(const TensorView& got, const TensorView& want) {
  const std::vector<double> a = to_f64(got), b = to_f64(want);
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::isfinite(a[i] - b[i])) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

std::string golden_root(const std::string& default_root) {
  const char* env = std::getenv("HYLA_GOLDEN_DIR");
  return env != nullptr && *env != '\0' ? std::string(env) : default_root;
}

std::vector<std::string> golden_arch_dirs(const std::string& root) {
  namespace fs = std::filesystem;
  std::vector<std::string> dirs;
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return dirs;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    if (fs::exists(it->path() / "config.json", ec) &&
        fs::exists(it->path() / "reference.safetensors", ec))
      dirs.push_back(it->path().string());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

::testing::AssertionResult expect_golden_archs(const std::string& root) {
  if (!golden_arch_dirs(root).empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "no golden architecture folder (config.json + reference.safetensors) under '" << root
         << "' (" << (std::getenv("HYLA_GOLDEN_DIR") ? "$HYLA_GOLDEN_DIR" : "the default root")
         << "): every test over the golden list would silently run nothing";
}

double reference_logits_spread(const std::string& arch_dir) {
  const std::string path = arch_dir + "/reference_meta.json";
  Result<nlohmann::json> meta = model::read_json_file(path);
  HYLA_CHECK(meta.ok(), meta.status().message());
  HYLA_CHECK(meta->contains("checks") && (*meta)["checks"].is_object(), path,
             ": no \"checks\" object (the generator's own consistency figures)");
  double spread = -1;
  for (const auto& [key, value] : (*meta)["checks"].items())
    if (value.is_number() && !value.is_boolean() && key.find("_vs_") != std::string::npos &&
        key.ends_with("_max_abs") && key.find("hidden") == std::string::npos)
      spread = std::max(spread, value.get<double>());
  HYLA_CHECK(spread > 0, path,
             ": \"checks\" holds no positive \"*_vs_*_max_abs\" logits figure to derive "
             "tolerances from");
  return spread;
}

}  // namespace hyla::testing
