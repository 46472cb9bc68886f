// Configs for the runtime memory tests: the golden models' configs (tests/data/golden/<arch>), the
// K3-style config, and variants with every layer of one mixer kind.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "core/error.h"
#include "core/tensor.h"
#include "model/architecture.h"
#include "model/config.h"

namespace hyla::testing {

/// The parsed config.json under tests/data/<path>; aborts when it does not load (broken test data).
inline model::ModelConfig test_config(const std::string& path) {
  Result<model::LoadedConfig> loaded =
      model::load_config(std::string(HYLA_TEST_DATA_DIR) + "/" + path);
  HYLA_CHECK(loaded.ok(), loaded.status().message());
  return loaded->config;
}

/// `config` with every layer's mixer set to `kind` (a pure-attention or pure-linear model).
inline model::ModelConfig with_all_mixers(model::ModelConfig config, model::MixerKind kind) {
  for (model::MixerKind& m : config.mixers) m = kind;
  return config;
}

/// Fills every byte of a host view (contiguous) with random bits.
inline void fill_random_bytes(const TensorView& t, std::mt19937& rng) {
  auto* bytes = static_cast<uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.span_bytes(); ++i) bytes[i] = uint8_t(rng() >> 24);
}

/// True when two host views of the same span hold the same bytes.
inline bool same_bytes(const TensorView& a, const TensorView& b) {
  return a.span_bytes() == b.span_bytes() &&
         std::memcmp(a.raw(), b.raw(), size_t(a.span_bytes())) == 0;
}

/// True when every byte of a host view is zero.
inline bool all_zero_bytes(const TensorView& t) {
  const auto* bytes = static_cast<const uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.span_bytes(); ++i)
    if (bytes[i] != 0) return false;
  return true;
}

}  // namespace hyla::testing
