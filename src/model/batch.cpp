// The step's index data (see batch.h): packing, staging and upload of StepIndices and PagedBatch.
#include "model/batch.h"

#include <algorithm>
#include <limits>

#include "core/device_memory.h"

namespace hyla::model {

bool Batch::is_decode() const {
  for (size_t b = 0; b + 1 < cu_seqlens.size(); ++b)
    if (cu_seqlens[b + 1] - cu_seqlens[b] != 1) return false;
  return true;
}

HostStaging::HostStaging(int64_t capacity)
    : data_(static_cast<int32_t*>(pinned_alloc(size_t(capacity) * sizeof(int32_t)))),
      capacity_(capacity) {}

HostStaging::~HostStaging() { pinned_free(data_); }

int32_t* HostStaging::take(int64_t n) {
  if (used_ + n > capacity_) return nullptr;
  int32_t* at = data_ + used_;
  used_ += n;
  return at;
}

Tensor upload_i32(const std::vector<int32_t>& packed, Device device, HostStaging* staging,
                  bool upload) {
  const int64_t n = int64_t(packed.size());
  int32_t* staged = staging && device.is_cuda() ? staging->take(n) : nullptr;
  if (staged) std::copy(packed.begin(), packed.end(), staged);
  if (!upload) return Tensor();
  if (staged) {
    Tensor out = Tensor::empty({n}, DType::kI32, device);
    device_copy_async(out.view().raw(), device, staged, Device::cpu(), size_t(n) * sizeof(int32_t));
    return out;
  }
  Tensor host = Tensor::empty({n}, DType::kI32);
  std::copy(packed.begin(), packed.end(), host.host<int32_t>());
  return device.is_cpu() ? host : host.to(device);
}

std::vector<int32_t> StepIndices::packed(const Batch& batch) {
  const int64_t T = int64_t(batch.tokens.size()), B = batch.num_sequences();
  std::vector<int32_t> packed(size_t(T + 3 * B + 1));
  int32_t* p = packed.data();
  std::copy(batch.tokens.begin(), batch.tokens.end(), p);
  std::copy(batch.cu_seqlens.begin(), batch.cu_seqlens.end(), p + T);
  // (forward_mtp reads no slots and may leave them out)
  std::copy_n(batch.state_slots.begin(), std::min(batch.state_slots.size(), size_t(B)),
              p + T + B + 1);
  for (int64_t b = 0; b < B; ++b) p[T + 2 * B + 1 + b] = batch.cu_seqlens[size_t(b + 1)] - 1;
  return packed;
}

StepIndices StepIndices::pack(const Batch& batch, Device device, HostStaging* staging) {
  const int64_t T = int64_t(batch.tokens.size()), B = batch.num_sequences();
  StepIndices s;
  s.device = upload_i32(packed(batch), device, staging);
  const TensorView all = s.device.view();
  s.tokens = all.slice(0, T);
  s.cu_seqlens = all.slice(T, T + B + 1);
  s.slots = all.slice(T + B + 1, T + 2 * B + 1);
  s.last_rows = all.slice(T + 2 * B + 1, T + 3 * B + 1);
  return s;
}

Result<PagedBatch> paged_batch(const Batch& batch, Device device, HostStaging* staging,
                               bool upload) {
  const int64_t B = batch.num_sequences(), T = int64_t(batch.tokens.size());
  int64_t max_pages = 1;
  for (const std::vector<int32_t>& table : batch.page_tables)
    max_pages = std::max(max_pages, int64_t(table.size()));
  // [cu (B+1) | past (B) | page_table (B max_pages) | positions (T) | own_page (B)]
  const int64_t at_past = B + 1, at_table = at_past + B, at_positions = at_table + B * max_pages,
                at_own = at_positions + T, total = at_own + B;
  std::vector<int32_t> packed(static_cast<size_t>(total));
  int32_t* h = packed.data();
  std::copy(batch.cu_seqlens.begin(), batch.cu_seqlens.end(), h);
  PagedBatch out;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t begin = batch.cu_seqlens[size_t(b)], end = batch.cu_seqlens[size_t(b + 1)];
    const int64_t length = batch.past[size_t(b)] + (end - begin);
    if (length > std::numeric_limits<int32_t>::max())
      return out_of_range("paged_batch: sequence ", b, " reaches position ", length - 1,
                          ", beyond the int32 positions of the attention kernels");
    out.max_length = std::max(out.max_length, length);
    h[at_past + b] = int32_t(batch.past[size_t(b)]);
    for (int64_t t = begin; t < end; ++t)
      h[at_positions + t] = int32_t(batch.past[size_t(b)] + (t - begin));
    const std::vector<int32_t>& pages = batch.page_tables[size_t(b)];
    int32_t* row = h + at_table + b * max_pages;
    std::copy(pages.begin(), pages.end(), row);
    std::fill(row + pages.size(), row + max_pages, -1);
    h[at_own + b] = int32_t(b);
  }
  out.storage = upload_i32(packed, device, staging, upload);
  if (!upload) return out;
  const TensorView all = out.storage.view();
  out.cu_seqlens = all.slice(0, at_past);
  out.past = all.slice(at_past, at_table);
  out.page_table = all.slice(at_table, at_positions).reshape({B, max_pages});
  out.positions = all.slice(at_positions, at_own);
  out.own_page = all.slice(at_own, total).reshape({B, 1});
  return out;
}

}  // namespace hyla::model
