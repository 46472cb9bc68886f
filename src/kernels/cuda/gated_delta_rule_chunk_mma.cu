// Tensor-core body of gated_delta_rule_chunk (kernels/gated_delta_rule.h) for GDN's scalar gate and
// KDA's per-channel one, d_k = 128 and d_v a multiple of 32: bf16 operands into the tensor cores
// (wgmma on sm_90a for the state, mma.sync elsewhere) with fp32 accumulation, the state kept in
// fp32 registers. cpu/gated_delta_rule.cpp (chunk_step) is the specification;
// gated_delta_rule_chunk.cu is the fp32 body of every other shape.
//
// Per chunk of n <= 64 tokens of one sequence and value head, with G_t = sum_{s<=t} g_s (within
// the chunk) and the state S^T [d_v, d_k] (the pool's layout):
//   A_kk[t, j] = beta_t exp(G_t - G_j) <k_t, k_j>  (t > j),  A_qk[t, j] = exp(G_t - G_j) <q_t, k_j>
//   T = (I + A_kk)^-1 Diag(beta)                          (the delta rule's UT transform)
//   Delta = T (V - Diag(exp(G)) K S)                      (the state's correction of each token)
//   O = Diag(exp(G)) Q S + A_qk Delta
//   S = exp(G_n) S + (Diag(exp(G_n - G)) K)^T Delta
// q and k enter the products raw (bf16); their l2norm and scale are per-row factors applied to the
// products' rows and columns, as are the decays, so no normalised copy is written: the per-token
// factors kg = exp(G) / |k|, qg = scale exp(G) / |q| and kd = exp(G_n - G) / |k|.
// KDA's decays differ per key channel c, so they cannot leave the products as row factors: the
// prepare kernel writes the scaled tiles Kg = K exp(G) / |k|, Qg = scale Q exp(G) / |q| and
// Kd = K exp(G_n - G) / |k| (every factor <= 1) that the state kernel reads in place of K and Q,
// and S's columns decay by exp(G_n[c]). Its A_kk and A_qk sum exp(G_t[c] - G_j[c]) inside the
// products, one 16-row block at a time against a reference row (kda_products).
//
// Three launches on the caller's stream; scratch in the caller's workspace (ChunkWorkspaceLayout
// tc_*, chunk-major and padded to 64 tokens):
//   plan     <<<1, 1>>>                    chunk numbering (gated_delta_rule_chunk_plan.cuh)
//   prepare  <<<items, 128>>>              (gated_delta_rule_chunk_mma_prepare.cu) an item a team
//                                          of 128 threads, chunk-major: a chunk of two value heads
//                                          of one key head (GDN; KDA: one): the norms, K K^T and
//                                          Q K^T on tensor cores once, then per value head G, T
//                                          (blockwise inverse of the 64x64 unit triangle, in
//                                          place), A_qk and the per-token factors kg, qg, kd; bf16
//                                          copies of q, k, v when the inputs are not bf16 rows
//   state    (gated_delta_rule_chunk_mma_state.cu) the chunks of one sequence in order for a
//            block of value rows of one value head, S^T in wgmma accumulators, a TMA warp
//            bringing the next chunk's tiles while the warpgroups compute, o out by tensor map:
//     roles  <<<(B, HV, d_v / 64), 288>>>  64 rows: a state warpgroup (X, Delta, the update) and
//                                          an output warpgroup forming O from the S^T and Delta^T
//                                          tiles handed over in shared memory (shortest chunk);
//     wide   <<<(B, HV, d_v / 128), 384>>> 128 rows: two warpgroups each doing every product of
//                                          its 64 rows from one shared stage (most chunks a
//                                          second per SM);
//            d_v an odd multiple of 32: the mma.sync kernel, 8 warps per 32 value rows.
// schedule() picks the state kernel and whether the two kernels run side by side: when the state
// blocks leave SMs idle (a few long sequences), the prepare kernel runs as one block of several
// 128-thread teams on each SM the state blocks leave, flagging each (chunk, value head) ready, and
// the state kernel as its programmatic dependent, its TMA warp waiting for a chunk's flag before
// loading the chunk.
//
// This file: the entry (the call's arguments and workspace regions, MmaArgs); what both kernels
// share is in gated_delta_rule_chunk_mma.cuh.
#include <algorithm>
#include <limits>
#ifdef HYLA_CHUNK_PROBE
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>
#endif

#include "kernels/cuda/gated_delta_rule_chunk_mma.cuh"

namespace hyla::kernels::cuda {

namespace {

/// How a call's kernels run: which state kernel, and one after the other (the prepare kernel a
/// team a block, an item each) or side by side (one block of `teams` teams on each of
/// prepare_blocks SMs).
struct Schedule {
  ChunkStateKernel state = ChunkStateKernel::kRoles;
  bool side_by_side = false;
  int teams = 1;
  int64_t prepare_blocks = 0;  // <= 0: a block an item
};

/// The state kernel and the mode by a cost model in units of the roles kernel's chunk time alone
/// with one block per SM (measured on the H200: docs/perf.md, chunk prefill, eleventh session):
/// - state blocks fill the GPU (the roles kernel's reach every SM): the wide kernel (more chunks a
///   second per SM), one after the other;
/// - else, for each kernel, one after the other costs c + r and side by side about max(c', r
///   sms / (sms - blocks)): c the kernel's chunk time alone (roles 1, wide 1.55), c' beside the
///   prepare kernel (roles 1.25, wide 1.55), r the prepare kernel's time over the roles kernel's
///   on the whole GPU (GDN 0.46, KDA 1.2).
/// Side by side, the prepare kernel runs first as one block of teams on each SM the state blocks
/// leave, marking items ready in chunk-major order; the state kernel as its programmatic
/// dependent, each chunk's loads waiting for its flags. Neither can hold the other up: the
/// prepare blocks wait for nothing and are all resident before the state kernel starts.
Schedule schedule(const chunk_mma::MmaArgs& a, bool kda, ChunkStateKernel asked) {
  int device = 0, sms = 0, smem_per_block = 0;
  HYLA_CUDA_CHECK(cudaGetDevice(&device));
  HYLA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  HYLA_CUDA_CHECK(
      cudaDeviceGetAttribute(&smem_per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int teams = chunk_mma::prepare_teams(kda, size_t(smem_per_block));
  const bool wide_ok = chunk_mma::wide_fits(a);
  const bool can_side = a.d_v % 64 == 0 && a.B > 0 && a.H > 0 && a.max_chunks > 0 && teams >= 2;
  Schedule best;
  if (asked == ChunkStateKernel::kAuto && wide_ok &&
      chunk_mma::state_blocks(a, ChunkStateKernel::kRoles) >= sms) {
    best.state = ChunkStateKernel::kWide;  // every SM busy: the wide kernel's throughput wins
  } else {
    const double r = kda ? 1.2 : 0.46;
    double best_cost = std::numeric_limits<double>::infinity();
    const auto consider = [&](ChunkStateKernel k, bool side, double cost) {
      if (cost < best_cost) best_cost = cost, best.state = k, best.side_by_side = side;
    };
    for (const ChunkStateKernel k : {ChunkStateKernel::kRoles, ChunkStateKernel::kWide}) {
      const bool wide = k == ChunkStateKernel::kWide;
      if ((asked != ChunkStateKernel::kAuto && k != asked) || (wide && !wide_ok)) continue;
      const double alone = wide ? 1.55 : 1.0, beside = wide ? 1.55 : 1.25;
      const int64_t blocks = chunk_mma::state_blocks(a, k);
      consider(k, false, alone + r);
      if (can_side && blocks < sms)
        consider(k, true, std::max(beside, r * sms / double(sms - blocks)));
    }
    HYLA_CHECK(best_cost < std::numeric_limits<double>::infinity(),
               "chunk state kernel: the wide kernel needs d_v % 128 == 0 (d_v ", a.d_v, ")");
  }
#ifdef HYLA_CHUNK_PROBE
  // The probe build takes the mode from HYLA_CHUNK_PROBE_MODE (side | sequential) when set.
  if (const char* mode = std::getenv("HYLA_CHUNK_PROBE_MODE"))
    best.side_by_side = can_side && std::string_view(mode) == "side" &&
                        chunk_mma::state_blocks(a, best.state) < sms;
#endif
  if (best.side_by_side) {
    best.teams = teams;
    best.prepare_blocks = sms - chunk_mma::state_blocks(a, best.state);
  }
  return best;
}

#ifdef HYLA_CHUNK_PROBE
/// The probe build's timeline (MmaArgs::probe) of a call, written to HYLA_CHUNK_PROBE_OUT when
/// set: a header (max_chunks, HV, row blocks, B, side by side), then the words.
class Probe {
 public:
  Probe(chunk_mma::MmaArgs& a, const Schedule& plan, cudaStream_t s)
      : path_(std::getenv("HYLA_CHUNK_PROBE_OUT")),
        words_(int64_t(a.max_chunks) * a.HV *
               (1 + chunk_mma::kProbeWords * std::max(a.d_v / 64, 1))),
        header_{uint64_t(a.max_chunks), uint64_t(a.HV), uint64_t(std::max(a.d_v / 64, 1)),
                uint64_t(a.B), plan.side_by_side} {
    if (path_ == nullptr) return;
    static unsigned long long* buffer = nullptr;
    static int64_t capacity = 0;
    if (words_ > capacity) {
      if (buffer != nullptr) HYLA_CUDA_CHECK(cudaFree(buffer));
      HYLA_CUDA_CHECK(cudaMalloc(&buffer, size_t(words_) * 8));
      capacity = words_;
    }
    HYLA_CUDA_CHECK(cudaMemsetAsync(buffer, 0, size_t(words_) * 8, s));
    a.probe = device_ = buffer;
  }
  void write(cudaStream_t s) const {
    if (path_ == nullptr) return;
    std::vector<unsigned long long> h(header_, header_ + 5);
    h.resize(size_t(words_) + 5);
    HYLA_CUDA_CHECK(cudaStreamSynchronize(s));
    HYLA_CUDA_CHECK(cudaMemcpy(h.data() + 5, device_, size_t(words_) * 8, cudaMemcpyDeviceToHost));
    if (FILE* f = std::fopen(path_, "wb")) {
      std::fwrite(h.data(), 8, h.size(), f);
      std::fclose(f);
    }
  }

 private:
  const char* path_;
  int64_t words_;
  unsigned long long header_[5];
  unsigned long long* device_ = nullptr;
};
#endif

}  // namespace

Status gated_delta_rule_chunk_mma(const GatedDeltaRuleParams& p, Stream stream) {
  using namespace chunk_mma;
  const ChunkWorkspaceShape shape = chunk_workspace_shape(p);
  const ChunkWorkspaceLayout layout = chunk_workspace_layout(shape);
  if (shape.HV == 0) return ok_status();

  MmaArgs a{};
  static_cast<ChunkCall&>(a) = chunk_call(p, shape, layout);
  {
    const int64_t per16 = a.o_bf16 ? 8 : 4;
    a.o_vec = p.o.stride(2) == 1 && a.o_st % per16 == 0 && a.o_sh % per16 == 0 &&
              reinterpret_cast<uintptr_t>(a.o) % 16 == 0;
    a.o_tma = chunk_bf16_rows(p.o);
    a.g_vec = a.g_st % 4 == 0 && a.g_sh % 4 == 0 && reinterpret_cast<uintptr_t>(a.g) % 16 == 0;
  }
  float* ws = ptr<float>(p.workspace);
  a.tmat = reinterpret_cast<bf16*>(ws + layout.tc_t);
  a.aqk = reinterpret_cast<bf16*>(ws + layout.tc_aqk);
  a.vec = ws + layout.tc_vec;
  const bool kda = shape.per_channel;
  if (kda) {
    a.kg = reinterpret_cast<bf16*>(ws + layout.tc_kg);
    a.qg = reinterpret_cast<bf16*>(ws + layout.tc_qg);
    a.kd = reinterpret_cast<bf16*>(ws + layout.tc_kd);
  }
  a.copies = shape.bf16_copies;
  // GDN's q / k copies are written from the registers of the staged path.
  a.qk_async = shape.qk_bf16_rows && (kda || !a.copies);
  if (a.copies) {  // packed [T, heads, d] copies (KDA: of v only)
    if (!kda) {
      a.q16 = reinterpret_cast<const bf16*>(ws + layout.tc_q);
      a.k16 = reinterpret_cast<const bf16*>(ws + layout.tc_k);
      a.q16_st = a.k16_st = int64_t(a.H) * kD, a.q16_sh = a.k16_sh = kD;
    }
    a.v16 = reinterpret_cast<const bf16*>(ws + layout.tc_v);
    a.v16_st = int64_t(a.HV) * a.d_v, a.v16_sh = a.d_v;
  } else {
    if (!kda) {
      a.q16 = ptr<const bf16>(p.q);
      a.k16 = ptr<const bf16>(p.k);
      a.q16_st = a.q_st, a.q16_sh = a.q_sh, a.k16_st = a.k_st, a.k16_sh = a.k_sh;
    }
    a.v16 = ptr<const bf16>(p.v);
    a.v16_st = a.v_st, a.v16_sh = a.v_sh;
  }

  // Chunk-major rows (chunk HV + hv) 64 + t index the workspace tiles, as int and as TMA's 32-bit
  // coordinates.
  HYLA_CHECK(int64_t(a.max_chunks) * a.HV * kC < (int64_t(1) << 31), "chunk workspace of ",
             int64_t(a.max_chunks) * a.HV * kC, " rows: TMA coordinates are 32-bit");

  const cudaStream_t s = to_cuda(stream);
  const Schedule plan = schedule(a, kda, p.state_kernel);
#ifdef HYLA_CHUNK_PROBE
  Probe probe(a, plan, s);
#endif
  if (plan.side_by_side) {
    a.ready = reinterpret_cast<uint32_t*>(ws + layout.tc_ready);
    HYLA_CUDA_CHECK(
        cudaMemsetAsync(a.ready, 0, size_t(a.max_chunks) * size_t(a.HV) * sizeof(uint32_t), s));
  }
  launch_chunk_plan(a, s);
  if (a.max_chunks > 0 && a.H > 0) launch_prepare(a, plan.teams, plan.prepare_blocks, s);
  if (a.B > 0) launch_state(a, plan.state, s);
#ifdef HYLA_CHUNK_PROBE
  probe.write(s);
#endif
  return ok_status();
}

}  // namespace hyla::kernels::cuda
