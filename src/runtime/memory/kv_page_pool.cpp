// KvPagePool (see kv_page_pool.h): page bookkeeping plus K/V (or latent) page tensors per
// attention layer.
#include "runtime/memory/kv_page_pool.h"

#include <algorithm>
#include <limits>

#include "core/device_memory.h"

namespace hyla::runtime {

using model::MixerKind;
using model::ModelConfig;

namespace {

/// Per-token row of one attention layer: `tensors` tensors (K and V, or the latent) of
/// [heads, dim].
struct KvRow {
  int64_t tensors, heads, dim;
  int64_t elements() const { return tensors * heads * dim; }
};

KvRow row_of(const ModelConfig& c, MixerKind kind) {
  if (kind == MixerKind::kLatentAttention)
    return {1, 1, c.latent.kv_lora_rank + c.latent.qk_rope_head_dim};
  return {2, c.attention.num_kv_heads, c.attention.head_dim};
}

bool is_attention(MixerKind kind) { return !model::is_linear_mixer(kind); }

/// Every global layer's mixer: the model's layers, then the MTP head's full-attention layers.
std::vector<MixerKind> global_layers(const ModelConfig& c) {
  std::vector<MixerKind> kinds = c.mixers;
  kinds.insert(kinds.end(), size_t(std::max<int64_t>(c.num_mtp_layers, 0)),
               MixerKind::kFullAttention);
  return kinds;
}

Status check_config(const ModelConfig& c) {
  const std::vector<MixerKind> kinds = global_layers(c);
  if (std::none_of(kinds.begin(), kinds.end(), is_attention))
    return invalid_argument("kv_page_pool: ", c.model_type,
                            " has no attention layer, so it needs no KV pages");
  for (MixerKind kind : kinds) {
    if (!is_attention(kind)) continue;
    const KvRow r = row_of(c, kind);
    if (r.heads <= 0 || r.dim <= 0)
      return invalid_argument("kv_page_pool: ", model::mixer_kind_name(kind),
                              " layers need KV heads and a head dim >= 1, got ", r.heads, " and ",
                              r.dim);
  }
  return ok_status();
}

}  // namespace

int64_t KvPagePool::bytes_per_token(const ModelConfig& config, KvPagePoolOptions options) {
  int64_t elements = 0;
  for (MixerKind kind : global_layers(config))
    if (is_attention(kind)) elements += row_of(config, kind).elements();
  return elements * dtype_size(options.dtype);
}

Result<KvPagePool> KvPagePool::create(const ModelConfig& config, int64_t num_pages,
                                      KvPagePoolOptions options) {
  if (options.dtype != DType::kF32 && options.dtype != DType::kBF16)
    return invalid_argument("kv_page_pool: dtype is ", dtype_name(options.dtype),
                            ", expected f32 or bf16");
  if (options.page_size < 1)
    return invalid_argument("kv_page_pool: page_size is ", options.page_size, ", expected >= 1");
  HYLA_RETURN_IF_ERROR(check_config(config));
  if (num_pages < 1 || num_pages > std::numeric_limits<int32_t>::max())
    return invalid_argument("kv_page_pool: num_pages is ", num_pages, ", expected [1, 2^31)");

  KvPagePool pool;
  pool.options_ = options;
  pool.capacity_ = num_pages;
  pool.page_bytes_ = bytes_per_token(config, options) * options.page_size;
  for (MixerKind kind : global_layers(config)) {
    if (!is_attention(kind)) {
      pool.attention_index_.push_back(-1);
      continue;
    }
    pool.attention_index_.push_back(int(pool.kinds_.size()));
    pool.kinds_.push_back(kind);
    const KvRow r = row_of(config, kind);
    pool.k_.push_back(Tensor::zeros({num_pages, options.page_size, r.heads, r.dim}, options.dtype,
                                    options.device));
    pool.v_.push_back(r.tensors == 2 ? Tensor::zeros({num_pages, options.page_size, r.heads, r.dim},
                                                     options.dtype, options.device)
                                     : Tensor());
  }
  pool.allocated_.assign(size_t(num_pages), 0);
  pool.free_list_.reserve(size_t(num_pages));
  for (int64_t p = num_pages - 1; p >= 0; --p) pool.free_list_.push_back(int32_t(p));
  return pool;
}

Result<std::vector<int32_t>> KvPagePool::allocate(int64_t pages) {
  if (pages < 0) return invalid_argument("kv_page_pool.allocate: ", pages, " pages requested");
  if (pages > free_pages())
    return Status(ErrorCode::kOutOfMemory,
                  str_cat("kv_page_pool.allocate: ", pages, " pages (", pages * page_size(),
                          " tokens) requested, ", free_pages(), " of ", capacity_, " free"));
  std::vector<int32_t> out(static_cast<size_t>(pages));
  for (int32_t& page : out) {
    page = free_list_.back();
    free_list_.pop_back();
    allocated_[size_t(page)] = 1;
  }
  return out;
}

Status KvPagePool::free(std::span<const int32_t> pages) {
  // Pass 1 marks each page 2 ("being freed") so a repeat is caught; on error the marks go back.
  auto unmark = [&](size_t upto) {
    for (size_t i = 0; i < upto; ++i) allocated_[size_t(pages[i])] = 1;
  };
  for (size_t i = 0; i < pages.size(); ++i) {
    const int32_t page = pages[i];
    Status bad;
    if (page < 0 || page >= capacity_)
      bad = out_of_range("kv_page_pool.free: page ", page, " is outside [0, ", capacity_, ")");
    else if (allocated_[size_t(page)] == 2)
      bad = invalid_argument("kv_page_pool.free: page ", page, " is listed twice");
    else if (allocated_[size_t(page)] == 0)
      bad = invalid_argument("kv_page_pool.free: page ", page,
                             " is not allocated (already freed, or never allocated)");
    if (!bad.ok()) {
      unmark(i);
      return bad;
    }
    allocated_[size_t(page)] = 2;
  }
  for (int32_t page : pages) {
    allocated_[size_t(page)] = 0;
    free_list_.push_back(page);
  }
  return ok_status();
}

Status KvPagePool::copy_page(int32_t from, int32_t to) {
  for (const int32_t page : {from, to})
    if (!is_allocated(page))
      return invalid_argument("kv_page_pool.copy_page: page ", page, " is not allocated (of ",
                              capacity_, ")");
  if (from == to) return ok_status();
  for (const std::vector<Tensor>* caches : {&k_, &v_})
    for (const Tensor& cache : *caches) {
      if (!cache.defined()) continue;
      const TensorView src = cache.view().select(from), dst = cache.view().select(to);
      device_copy(dst.raw(), options_.device, src.raw(), options_.device, size_t(src.span_bytes()));
    }
  return ok_status();
}

bool KvPagePool::is_allocated(int32_t page) const {
  return page >= 0 && page < capacity_ && allocated_[size_t(page)] != 0;
}

int64_t KvPagePool::pages_for_tokens(int64_t tokens) const {
  HYLA_CHECK(tokens >= 0, "pages_for_tokens(", tokens, ")");
  return (tokens + page_size() - 1) / page_size();
}

int KvPagePool::attention_index(int layer) const {
  HYLA_CHECK(layer >= 0 && size_t(layer) < attention_index_.size(), "attention_index(", layer,
             ") of a model with ", attention_index_.size(), " layers (MTP layers included)");
  return attention_index_[size_t(layer)];
}

MixerKind KvPagePool::layer_kind(int attention_index) const {
  HYLA_CHECK(attention_index >= 0 && attention_index < num_layers(), "layer_kind(", attention_index,
             ") of ", num_layers(), " attention layers");
  return kinds_[size_t(attention_index)];
}

TensorView KvPagePool::k_cache(int attention_index) const {
  HYLA_CHECK(attention_index >= 0 && attention_index < num_layers(), "k_cache(", attention_index,
             ") of ", num_layers(), " attention layers");
  return k_[size_t(attention_index)].view();
}

TensorView KvPagePool::v_cache(int attention_index) const {
  HYLA_CHECK(attention_index >= 0 && attention_index < num_layers(), "v_cache(", attention_index,
             ") of ", num_layers(), " attention layers");
  return v_[size_t(attention_index)].view();
}

}  // namespace hyla::runtime
