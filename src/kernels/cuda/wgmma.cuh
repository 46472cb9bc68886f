// Hopper warpgroup MMA (wgmma.mma_async, sm_90a): shared-memory matrix descriptors, the
// fence / commit / wait protocol, and the bf16 shapes the chunk state kernel uses, with the A
// operand in registers and B in shared memory. CUDA code only (include from .cu files).
//
// Register layouts (a warpgroup = 4 warps; warp w owns rows 16 w .. 16 w + 15 of M = 64; lane
// 4 g + c): the A fragment of a 16-deep step is the mma.sync m16n8k16 A fragment of the warp's
// 16 rows; the f32 accumulator of m64nN holds, per 8 columns j, rows 16 w + g (d[4 j], d[4 j + 1]
// at columns 8 j + 2 c, + 1) and 16 w + g + 8 (d[4 j + 2], d[4 j + 3]).
//
// B tiles here use the 128-byte swizzle of TMA boxes whose rows are 128 bytes (64 bf16) and which
// start at 1024-byte boundaries. K-major B (rows = n, 128 bytes of k each): 8-row groups 1024
// bytes apart (stride byte offset); a 16-deep step at k0 starts 2 k0 bytes into the row (the
// swizzle is applied to the address bits, so the start moves by 32 bytes a step). MN-major B
// (rows = k, 128 bytes of n each): 8-row groups along k 1024 bytes apart, and the next 64
// columns of n `lbo` bytes on (the leading byte offset).
#pragma once

#include <cstdint>

namespace hyla::kernels::cuda::wgmma {

/// A shared-memory matrix descriptor, 128-byte swizzle (layout type 1), base offset 0.
__device__ __forceinline__ uint64_t desc_sw128(uint32_t smem_byte_addr, uint32_t lbo_bytes,
                                               uint32_t sbo_bytes) {
  return uint64_t((smem_byte_addr >> 4) & 0x3FFF) | (uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}
/// K-major B: 8-row groups of 128-byte rows, 1024 bytes apart (the leading offset is unused).
__device__ __forceinline__ uint64_t desc_k_major(uint32_t smem_byte_addr) {
  return desc_sw128(smem_byte_addr, 16, 1024);
}
/// MN-major B: k rows of 128 bytes (64 n), the next 64 n `lbo` bytes on.
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t smem_byte_addr, uint32_t lbo) {
  return desc_sw128(smem_byte_addr, lbo, 1024);
}

/// desc with its start address `bytes` further on (a multiple of 16; the start is the low bits).
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}
/// The byte offset of 16-deep step ks in a K-major tile of two boxes of 64 rows x 64 k (8 KB each:
/// k 0-63, 64-127).
__device__ __forceinline__ uint32_t k_step_bytes(int ks) {
  return (ks >> 2) * 8192 + (ks & 3) * 32;
}

/// Before the first wgmma that reads registers (accumulators, A) written by other instructions.
__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
/// Waits until at most kPending of the warpgroup's committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
/// Keeps the compiler from moving accesses of r across a wait (the registers an in-flight wgmma
/// writes must not be touched before its group completes).
template <int N>
__device__ __forceinline__ void fence_operand(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_operand(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

/// d (64 x 64 f32) = a b + (accumulate ? d : 0): a the warp's A fragment (bf16), b by descriptor,
/// kTransB = 1 for MN-major B.
template <int kTransB>
__device__ __forceinline__ void mma_m64n64k16(float (&d)[32], const uint32_t (&a)[4], uint64_t b,
                                              bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)), "n"(kTransB));
}

/// d (64 x 64 f32) = a b + (accumulate ? d : 0) with both operands in shared memory: a K-major
/// (desc_k_major of its 64 rows), b by descriptor, K-major.
__device__ __forceinline__ void mma_m64n64k16_ss(float (&d)[32], uint64_t a, uint64_t b,
                                                 bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p, 1, 1, 0, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "r"(int(accumulate)));
}

/// d (64 x 128 f32) = a b + (accumulate ? d : 0), as mma_m64n64k16.
template <int kTransB>
__device__ __forceinline__ void mma_m64n128k16(float (&d)[64], const uint32_t (&a)[4], uint64_t b,
                                               bool accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(int(accumulate)), "n"(kTransB));
}

}  // namespace hyla::kernels::cuda::wgmma
