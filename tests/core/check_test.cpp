// check.h: every failed check names the op, the argument, what it got and what was expected.
#include "core/check.h"

#include <cstdint>
#include <vector>

#include "testing.h"

namespace hyla {
namespace {

using testing::int32_tensor;

constexpr const char* kOp = "gated_delta_rule_chunk";

TEST(CheckTest, ShapePassesOnMatchAndWildcards) {
  Tensor k = Tensor::empty({64, 2, 128}, DType::kF32);
  EXPECT_OK(check_shape(kOp, "k", k, {64, 2, 128}, "T, H, d_k"));
  EXPECT_OK(check_shape(kOp, "k", k, {kAnyDim, 2, kAnyDim}, "T, H, d_k"));
}

TEST(CheckTest, ShapeMessageHasOpNameGotAndExpected) {
  Tensor k = Tensor::empty({64, 2, 128}, DType::kF32);
  const Status s = check_shape(kOp, "k", k, {64, 2, 64}, "T, H, d_k");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "gated_delta_rule_chunk: k has shape [64, 2, 128], expected [64, 2, 64] (T, H, d_k)");
  // Wrong rank, and wildcards shown as '*'.
  EXPECT_ERROR_CONTAINS(
      check_shape(kOp, "g", k, {64, kAnyDim}, "T, HV"),
      "gated_delta_rule_chunk: g has shape [64, 2, 128], expected [64, *] (T, HV)");
  EXPECT_ERROR_CONTAINS(check_shape(kOp, "beta", TensorView(), {64, 2}, "T, HV"),
                        "gated_delta_rule_chunk: beta is missing");
}

TEST(CheckTest, DtypeMessageListsEveryAllowedType) {
  Tensor q = Tensor::empty({4, 8}, DType::kF16);
  EXPECT_OK(check_dtype(kOp, "q", q, {DType::kF32, DType::kF16}));
  EXPECT_ERROR_CONTAINS(check_dtype(kOp, "q", q, {DType::kF32, DType::kBF16}),
                        "gated_delta_rule_chunk: q has dtype f16, expected f32 or bf16");
  EXPECT_ERROR_CONTAINS(check_dtype("conv", "state", q, {DType::kBF16}),
                        "conv: state has dtype f16, expected bf16");
}

TEST(CheckTest, DeviceMessageNamesBothDevices) {
  Tensor q = Tensor::empty({4}, DType::kF32);
  EXPECT_OK(check_device(kOp, "q", q, Device::cpu()));
  EXPECT_ERROR_CONTAINS(check_device(kOp, "q", q, Device::cuda(1)),
                        "gated_delta_rule_chunk: q is on cpu, expected cuda:1");
  // Only the pointer's device tag is read: a view tagged cuda needs no CUDA build to be checked.
  TensorView on_gpu(q.view().raw(), DType::kF32, {4}, Device::cuda(0));
  EXPECT_ERROR_CONTAINS(check_device(kOp, "o", on_gpu, Device::cpu()),
                        "gated_delta_rule_chunk: o is on cuda:0, expected cpu");
}

TEST(CheckTest, ContiguityMessagesShowStrides) {
  Tensor t = Tensor::empty({3, 4}, DType::kF32);
  EXPECT_OK(check_contiguous(kOp, "state_pool", t));
  EXPECT_OK(check_last_dim_contiguous(kOp, "q", t));
  // Columns 0..1 of the [3, 4] matrix: the last dim is contiguous, the whole view is not.
  const int64_t shape[] = {3, 2};
  const int64_t stride[] = {4, 1};
  TensorView cols(t.view().raw(), DType::kF32, 2, shape, stride);
  EXPECT_OK(check_last_dim_contiguous(kOp, "q", cols));
  EXPECT_ERROR_CONTAINS(
      check_contiguous(kOp, "state_pool", cols),
      "gated_delta_rule_chunk: state_pool [3, 2] must be contiguous: has strides [4, 1], "
      "expected [2, 1]");
  // The transpose: the last dim has stride 4.
  const int64_t t_shape[] = {4, 3};
  const int64_t t_stride[] = {1, 4};
  TensorView transposed(t.view().raw(), DType::kF32, 2, t_shape, t_stride);
  EXPECT_ERROR_CONTAINS(check_last_dim_contiguous(kOp, "k", transposed),
                        "gated_delta_rule_chunk: k must have a contiguous last dimension: stride "
                        "is 4, expected 1");
  // A last dim of size 1 has no stride to speak of.
  const int64_t col_shape[] = {3, 1};
  EXPECT_OK(check_last_dim_contiguous(
      kOp, "k", TensorView(t.view().raw(), DType::kF32, 2, col_shape, t_stride)));
}

TEST(CheckTest, CuSeqlensAcceptsValidOffsets) {
  EXPECT_OK(check_cu_seqlens(kOp, int32_tensor({0, 5, 5, 70}), 70));  // an empty sequence is fine
  EXPECT_OK(check_cu_seqlens(kOp, int32_tensor({0, 1}), 1));
  // A strided view: every other element of {0, 99, 3, 99, 8}.
  Tensor backing = int32_tensor({0, 99, 3, 99, 8});
  const int64_t shape[] = {3};
  const int64_t stride[] = {2};
  EXPECT_OK(
      check_cu_seqlens(kOp, TensorView(backing.view().raw(), DType::kI32, 1, shape, stride), 8));
}

TEST(CheckTest, CuSeqlensMessages) {
  EXPECT_ERROR_CONTAINS(check_cu_seqlens(kOp, int32_tensor({1, 5}), 5),
                        "gated_delta_rule_chunk: cu_seqlens[0] is 1, expected 0");
  EXPECT_ERROR_CONTAINS(check_cu_seqlens(kOp, int32_tensor({0, 7, 4, 9}), 9),
                        "gated_delta_rule_chunk: cu_seqlens is not non-decreasing: "
                        "cu_seqlens[2] = 4 < cu_seqlens[1] = 7");
  EXPECT_ERROR_CONTAINS(check_cu_seqlens(kOp, int32_tensor({0, 5, 12}), 13),
                        "gated_delta_rule_chunk: cu_seqlens[B] is 12, expected 13");
  EXPECT_ERROR_CONTAINS(check_cu_seqlens(kOp, int32_tensor({0}), 0),
                        "gated_delta_rule_chunk: cu_seqlens has 1 entries, expected at least 2");
  Tensor as_i64 = Tensor::zeros({2}, DType::kI64);
  EXPECT_ERROR_CONTAINS(check_cu_seqlens(kOp, as_i64, 0),
                        "gated_delta_rule_chunk: cu_seqlens has dtype i64, expected i32");
  Tensor two_d = Tensor::zeros({2, 2}, DType::kI32);
  EXPECT_ERROR_CONTAINS(check_cu_seqlens(kOp, two_d, 0),
                        "gated_delta_rule_chunk: cu_seqlens has shape [2, 2], expected [*] (B+1)");
  EXPECT_ERROR_CONTAINS(check_cu_seqlens(kOp, TensorView(), 0),
                        "gated_delta_rule_chunk: cu_seqlens is missing");
}

TEST(CheckTest, SlotsAcceptRangeAndSkip) {
  EXPECT_OK(check_slots(kOp, "initial_slots", int32_tensor({0, 3, -1, 2}), 4, 4));
}

TEST(CheckTest, SlotsMessages) {
  const Status s = check_slots(kOp, "final_slots", int32_tensor({0, 4}), 2, 4);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(s.message(),
            "gated_delta_rule_chunk: final_slots[1] = 4 is outside [0, 4) and is not -1 (skip)");
  EXPECT_ERROR_CONTAINS(check_slots(kOp, "initial_slots", int32_tensor({-2}), 1, 8),
                        "gated_delta_rule_chunk: initial_slots[0] = -2 is outside [0, 8)");
  EXPECT_ERROR_CONTAINS(check_slots(kOp, "initial_slots", int32_tensor({0, 1, 2}), 2, 8),
                        "gated_delta_rule_chunk: initial_slots has shape [3], expected [2] (B)");
  Tensor as_u8 = Tensor::zeros({2}, DType::kU8);
  EXPECT_ERROR_CONTAINS(check_slots(kOp, "final_slots", as_u8, 2, 8),
                        "gated_delta_rule_chunk: final_slots has dtype u8, expected i32");
}

// Index tensors on a CUDA device: shape, dtype and device are checked, the values are not read
// (a CUDA call does not synchronise to copy them back). The views below point at host memory
// holding invalid values and are labelled CUDA: reading them would report those values.
TEST(CheckTest, DeviceIndexTensorsAreNotRead) {
  Tensor bad_offsets = int32_tensor({3, 1, 0});
  Tensor bad_slots = int32_tensor({7, 7, -5});
  const TensorView cu(bad_offsets.view().raw(), DType::kI32, {3}, Device::cuda());
  const TensorView slots(bad_slots.view().raw(), DType::kI32, {3}, Device::cuda());
  EXPECT_OK(check_cu_seqlens(kOp, cu, 9, Device::cuda()));
  EXPECT_OK(check_slots(kOp, "final_slots", slots, 3, 4, Device::cuda()));
  EXPECT_OK(check_slot_ownership(kOp, slots, "initial_slots", slots, "final_slots", 4));
  // The same values on the host are read and refused.
  EXPECT_ERROR_CONTAINS(check_cu_seqlens(kOp, bad_offsets, 9), "cu_seqlens[0] is 3, expected 0");
  EXPECT_ERROR_CONTAINS(check_slots(kOp, "final_slots", bad_slots, 3, 4),
                        "final_slots[0] = 7 is outside [0, 4)");
  // Shape, dtype and device still are checked for device calls.
  EXPECT_ERROR_CONTAINS(check_cu_seqlens(kOp, cu, 9, Device::cpu()),
                        "gated_delta_rule_chunk: cu_seqlens is on cuda:0, expected cpu");
  EXPECT_ERROR_CONTAINS(check_cu_seqlens(kOp, bad_offsets, 9, Device::cuda()),
                        "gated_delta_rule_chunk: cu_seqlens is on cpu, expected cuda:0");
  EXPECT_ERROR_CONTAINS(check_slots(kOp, "final_slots", slots, 2, 4, Device::cuda()),
                        "final_slots has shape [3], expected [2] (B)");
  const TensorView one(bad_offsets.view().raw(), DType::kI32, {1}, Device::cuda());
  EXPECT_ERROR_CONTAINS(check_cu_seqlens(kOp, one, 0, Device::cuda()),
                        "cu_seqlens has 1 entries, expected at least 2");
}

}  // namespace
}  // namespace hyla
