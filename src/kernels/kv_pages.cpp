// Entry points of the paged-cache copies (see kv_pages.h) and the page-index check shared with
// paged_attention: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/kv_pages.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_index_tensor(std::string_view op, std::string_view name, const TensorView& t,
                          std::initializer_list<int64_t> shape, std::string_view dims,
                          Device device) {
  HYLA_RETURN_IF_ERROR(check_shape(op, name, t, shape, dims));
  HYLA_RETURN_IF_ERROR(check_dtype(op, name, t, {DType::kI32}));
  HYLA_RETURN_IF_ERROR(check_device(op, name, t, device));
  return check_contiguous(op, name, t);
}

/// pages [num_pages, page_size, heads, dim] f32|bf16 on `device`, last dim contiguous.
Status check_pages(std::string_view op, std::string_view name, const TensorView& pages,
                   std::initializer_list<int64_t> shape, Device device) {
  HYLA_RETURN_IF_ERROR(check_shape(op, name, pages, shape, "num_pages, page_size, H, d"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, name, pages, {DType::kF32, DType::kBF16}));
  HYLA_RETURN_IF_ERROR(check_device(op, name, pages, device));
  HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, pages));
  if (pages.size(0) < 1 || pages.size(1) < 1 || pages.size(2) < 1 || pages.size(3) < 1)
    return invalid_argument(op, ": ", name, " has shape ", pages.shape_string(),
                            ", expected every dimension >= 1");
  return ok_status();
}

/// [T, H, d] f32 rows on `device`, last dim contiguous.
Status check_rows(std::string_view op, std::string_view name, const TensorView& rows, int64_t T,
                  int64_t H, int64_t d, Device device) {
  HYLA_RETURN_IF_ERROR(check_shape(op, name, rows, {T, H, d}, "T, H, d"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, name, rows, {DType::kF32}));
  HYLA_RETURN_IF_ERROR(check_device(op, name, rows, device));
  return check_last_dim_contiguous(op, name, rows);
}

Status check_kv_page_write(const KvPageWriteParams& p) {
  constexpr std::string_view op = "kv_page_write";
  HYLA_RETURN_IF_ERROR(check_shape(op, "k", p.k, {kAnyDim, kAnyDim, kAnyDim}, "T, H, d_k"));
  const Device device = p.k.device();
  const int64_t T = p.k.size(0), H = p.k.size(1);
  HYLA_RETURN_IF_ERROR(check_rows(op, "k", p.k, T, H, p.k.size(2), device));
  HYLA_RETURN_IF_ERROR(
      check_pages(op, "k_pages", p.k_pages, {kAnyDim, kAnyDim, H, p.k.size(2)}, device));
  const int64_t num_pages = p.k_pages.size(0), page_size = p.k_pages.size(1);
  if (p.v.defined() != p.v_pages.defined())
    return invalid_argument(op, ": v and v_pages go together (v ",
                            p.v.defined() ? "given" : "absent", ", v_pages ",
                            p.v_pages.defined() ? "given" : "absent", ")");
  if (p.v.defined()) {
    HYLA_RETURN_IF_ERROR(check_shape(op, "v", p.v, {T, H, kAnyDim}, "T, H, d_v"));
    HYLA_RETURN_IF_ERROR(check_rows(op, "v", p.v, T, H, p.v.size(2), device));
    HYLA_RETURN_IF_ERROR(
        check_pages(op, "v_pages", p.v_pages, {num_pages, page_size, H, p.v.size(2)}, device));
    HYLA_RETURN_IF_ERROR(check_dtype(op, "v_pages", p.v_pages, {p.k_pages.dtype()}));
    if (p.v_pages.raw() == p.k_pages.raw())
      return invalid_argument(op, ": v_pages and k_pages are the same memory");
  }
  return check_page_index(op, p.index, T, num_pages, page_size, device, /*writes=*/true);
}

Status check_kv_page_gather(const KvPageGatherParams& p) {
  constexpr std::string_view op = "kv_page_gather";
  const Device device = p.pages.device();
  HYLA_RETURN_IF_ERROR(
      check_pages(op, "pages", p.pages, {kAnyDim, kAnyDim, kAnyDim, kAnyDim}, device));
  const int64_t H = p.pages.size(2), d = p.pages.size(3);
  HYLA_RETURN_IF_ERROR(check_shape(op, "out", p.out, {kAnyDim, kAnyDim, H, d}, "B, R, H, d"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "out", p.out, {DType::kF32}));
  HYLA_RETURN_IF_ERROR(check_device(op, "out", p.out, device));
  HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "out", p.out));
  if (p.out.raw() == p.pages.raw())
    return invalid_argument(op, ": out is the pages' memory; it needs its own");
  HYLA_RETURN_IF_ERROR(check_shape(op, "past", p.index.past, {p.out.size(0)}, "B"));
  HYLA_RETURN_IF_ERROR(check_page_index(op, p.index, kAnyDim, p.pages.size(0), p.pages.size(1),
                                        device, /*writes=*/false));
  if (device.is_cpu()) {
    const int32_t* cu = p.index.cu_seqlens.host<int32_t>();
    const int32_t* past = p.index.past.host<int32_t>();
    for (int64_t b = 0; b < p.out.size(0); ++b) {
      const int64_t len = int64_t(past[b]) + cu[b + 1] - cu[b];
      if (len > p.out.size(1))
        return invalid_argument(op, ": sequence ", b, " has ", len,
                                " rows, out holds R = ", p.out.size(1), " per sequence");
    }
  }
  return ok_status();
}

}  // namespace

Status check_page_index(std::string_view op, const PageIndex& index, int64_t T, int64_t num_pages,
                        int64_t page_size, Device device, bool writes) {
  HYLA_RETURN_IF_ERROR(
      check_index_tensor(op, "cu_seqlens", index.cu_seqlens, {kAnyDim}, "B+1", device));
  const int64_t B = index.cu_seqlens.size(0) - 1;
  if (B < 1)
    return invalid_argument(op, ": cu_seqlens has ", B + 1, " entries, expected at least 2");
  HYLA_RETURN_IF_ERROR(check_index_tensor(op, "past", index.past, {B}, "B", device));
  HYLA_RETURN_IF_ERROR(
      check_index_tensor(op, "page_table", index.page_table, {B, kAnyDim}, "B, max_pages", device));
  const int64_t max_pages = index.page_table.size(1);
  if (max_pages < 1)
    return invalid_argument(op, ": page_table has no columns, expected >= 1 page per sequence");
  if (!device.is_cpu()) return ok_status();

  const int32_t* cu = index.cu_seqlens.host<int32_t>();
  HYLA_RETURN_IF_ERROR(check_cu_seqlens(op, index.cu_seqlens, T == kAnyDim ? cu[B] : T));
  const int32_t* past = index.past.host<int32_t>();
  const int32_t* table = index.page_table.host<int32_t>();
  std::vector<int64_t> written;  // page * page_size + row of every new token (writes only)
  if (writes) written.reserve(size_t(cu[B]));
  for (int64_t b = 0; b < B; ++b) {
    if (past[b] < 0) return invalid_argument(op, ": past[", b, "] is ", past[b], ", expected >= 0");
    const int64_t len = int64_t(past[b]) + cu[b + 1] - cu[b];
    if (len > max_pages * page_size)
      return out_of_range(op, ": sequence ", b, " has ", len, " positions, its page table ",
                          max_pages, " pages of ", page_size, " rows");
    for (int64_t page = 0; page * page_size < len; ++page) {
      const int32_t id = table[b * max_pages + page];
      if (id < 0 || id >= num_pages)
        return out_of_range(op, ": page_table[", b, ", ", page, "] is ", id, ", outside [0, ",
                            num_pages, ")");
    }
    if (writes)
      for (int64_t pos = past[b]; pos < len; ++pos)
        written.push_back(int64_t(table[b * max_pages + pos / page_size]) * page_size +
                          pos % page_size);
  }
  std::sort(written.begin(), written.end());
  const auto twice = std::adjacent_find(written.begin(), written.end());
  if (twice != written.end())
    return invalid_argument(op, ": two new tokens write row ", *twice % page_size, " of page ",
                            *twice / page_size, " (sequences share a page row they both write)");
  return ok_status();
}

Status kv_page_write(const KvPageWriteParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_kv_page_write(p));
  return dispatch(
      "kv_page_write", p.k.device(), stream, [&] { cpu::kv_page_write(p); },
      HYLA_CUDA_BODY(cuda::kv_page_write(p, stream)));
}

Status kv_page_gather(const KvPageGatherParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_kv_page_gather(p));
  return dispatch(
      "kv_page_gather", p.pages.device(), stream, [&] { cpu::kv_page_gather(p); },
      HYLA_CUDA_BODY(cuda::kv_page_gather(p, stream)));
}

}  // namespace hyla::kernels
