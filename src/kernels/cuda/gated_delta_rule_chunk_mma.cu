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
// Context parallelism (shape.cp_segments P > 1: a few long sequences of few heads, e.g. one GPU's
// share of them): each sequence's chunks in P segments; the prepare kernel over every chunk, then
//   transfer <<<(B P, HV, 1 + d_v / 128), 384>>> every segment but the last from S^T = I with
//            v = 0 (M's d_k rows) and from zeros with its v (L's rows): S^T_end = S^T_start M + L
//   combine  <<<(B, HV, d_v / 16), 256>>> S_0 from the pool, S_{j+1} = S_j M_j + L_j
//   state    over the segments as sequences from their S_j (roles or wide), the last to the pool;
// exact up to rounding (the recurrence is linear in S), the chain P times shorter for twice the
// state work (run_segments).
// schedule() picks the state kernel and whether the two kernels run side by side: when the state
// blocks leave SMs idle (a few long sequences), the prepare kernel runs one block of several
// 128-thread teams on every SM; the blocks on the first SM ids (whole TPCs, SMs 2i and 2i + 1, as
// many as the state kernel has blocks) leave at once so that the state blocks take those SMs and no
// state block shares a TPC with a prepare block; the others take items from a counter, flagging
// each (chunk, value head) ready. The state kernel runs as its programmatic dependent, its TMA warp
// waiting for a chunk's flag before loading the chunk and prefetching the next chunk's tiles into
// L2 (the prepare kernel's traffic lengthens the loads).
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
/// with one block per SM (measured on the H200: docs/perf-history.md, "GPU chunk prefill", the
/// entries of 9162263 and e94a13d):
/// - state blocks fill the GPU (the roles kernel's reach every SM): the wide kernel (more chunks a
///   second per SM), one after the other;
/// - else, for each kernel, one after the other costs c + r and side by side about max(c', r
///   sms / (sms - blocks)): c the kernel's chunk time alone (roles 1, wide 1.55), c' beside the
///   prepare kernel (roles 1.0: ~0.93 measured with the next chunk's tiles prefetched; wide
///   1.55), r the prepare kernel's time over the roles kernel's on the whole GPU (GDN 0.46, KDA
///   1.2).
/// Side by side, the prepare kernel runs first as one block of teams on every SM, those on the
/// state blocks' TPCs leaving at once (the last block to arrive stays if no other works), the
/// rest marking items ready in chunk-major order; the state kernel as its programmatic
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
      const double alone = wide ? 1.55 : 1.0, beside = wide ? 1.55 : 1.0;
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
    best.prepare_blocks = sms;  // its blocks on the state kernel's SMs leave them at once
  }
  return best;
}

/// <<<1, 1>>>, context parallelism: sequence b's chunks in P segments of ceil(chunks / P) (the
/// last ones may be empty), segment j as sequence b P + j of `seg` (its cu, chunk_first,
/// boundary_first, initial slot b P + j in seg.initial_states, final slot the sequence's for
/// j = P - 1, else none), from the plan of `a` (chunk_plan_kernel ran first).
__global__ void segment_plan_kernel(const __grid_constant__ chunk_mma::MmaArgs a,
                                    const __grid_constant__ chunk_mma::MmaArgs seg,
                                    int32_t* initial, int32_t* final_slots, int32_t* cu) {
  const int P = seg.segments;
  int end = 0;
  for (int b = 0; b < a.B; ++b) {
    int begin;
    chunk_sequence_range(a.cu, a.cu_stride, a.T, b, begin, end);
    const int first = a.chunk_first[b], n = a.chunk_first[b + 1] - first;
    const int per = (n + P - 1) / P;
    const int32_t final_slot =
        a.final_slots != nullptr ? a.final_slots[b * a.final_stride] : int32_t(-1);
    for (int j = 0; j < P; ++j) {
      const int at = b * P + j, c0 = min(j * per, n);
      cu[at] = min(begin + c0 * kDeltaRuleChunk, end);
      seg.chunk_first[at] = first + c0;
      seg.boundary_first[at] = a.boundary_first[b] + c0;
      initial[at] = at;
      final_slots[at] = j == P - 1 ? final_slot : -1;
    }
  }
  cu[a.B * P] = end;
  seg.chunk_first[a.B * P] = a.chunk_first[a.B];
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

/// Context parallelism (a's plan numbered): the prepare kernel over every chunk; each sequence's
/// segments (but the last) run at once from S^T = I with v = 0 and from zeros with their v, giving
/// the segment's transfer S^T_end = S^T_start M + L (wgmma_transfer_kernel); the segments' initial
/// states S_{j+1} = S_j M_j + L_j in order from the pool's (segment_combine_kernel); then the state
/// kernel over the segments as sequences, each from its initial state, the last one's final
/// state to the pool. Exact up to rounding: the recurrence is linear in S.
void run_segments(chunk_mma::MmaArgs& a, const ChunkWorkspaceLayout& layout, int P,
                  ChunkStateKernel asked, float* ws, cudaStream_t s) {
  using namespace chunk_mma;
  MmaArgs seg = a;
  seg.segments = P;
  seg.B = a.B * P;
  seg.cu = reinterpret_cast<const int32_t*>(ws + layout.cp_cu);
  seg.cu_stride = 1;
  seg.chunk_first = reinterpret_cast<int32_t*>(ws + layout.cp_chunk_first);
  seg.boundary_first = reinterpret_cast<int32_t*>(ws + layout.cp_boundary_first);
  seg.initial_slots = reinterpret_cast<const int32_t*>(ws + layout.cp_initial);
  seg.initial_stride = 1;
  seg.final_slots = reinterpret_cast<const int32_t*>(ws + layout.cp_final);
  seg.final_stride = 1;
  seg.initial_states = ws + layout.cp_states;
  seg.initial_count = seg.B;
  seg.transfer = ws + layout.cp_transfer;
  segment_plan_kernel<<<1, 1, 0, s>>>(a, seg, reinterpret_cast<int32_t*>(ws + layout.cp_initial),
                                      reinterpret_cast<int32_t*>(ws + layout.cp_final),
                                      reinterpret_cast<int32_t*>(ws + layout.cp_cu));
  HYLA_CUDA_CHECK_LAUNCH();
  if (a.max_chunks > 0 && a.H > 0) launch_prepare(a, 1, 0, s);
  if (a.B == 0) return;
  launch_transfer(seg, s);
  MmaArgs joined = a;
  joined.segments = P;
  joined.transfer = seg.transfer;
  joined.initial_states = seg.initial_states;
  launch_combine(joined, s);
  int device = 0, sms = 0;
  HYLA_CUDA_CHECK(cudaGetDevice(&device));
  HYLA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const ChunkStateKernel kernel = asked != ChunkStateKernel::kAuto ? asked
                                  : state_blocks(seg, ChunkStateKernel::kRoles) >= sms
                                      ? ChunkStateKernel::kWide
                                      : ChunkStateKernel::kRoles;
  launch_state(seg, kernel, s);
}

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
  launch_chunk_plan(a, s);
  if (shape.cp_segments > 1) {  // a few long sequences of few heads
    run_segments(a, layout, int(shape.cp_segments), p.state_kernel, ws, s);
    return ok_status();
  }
  const Schedule plan = schedule(a, kda, p.state_kernel);
#ifdef HYLA_CHUNK_PROBE
  Probe probe(a, plan, s);
#endif
  if (plan.side_by_side) {
    // The flags, then the prepare kernel's two counters; its blocks on the first SMs (whole TPCs,
    // as many as the state kernel has blocks) leave them to the state blocks.
    const size_t flags = size_t(a.max_chunks) * size_t(a.HV);
    a.ready = reinterpret_cast<uint32_t*>(ws + layout.tc_ready);
    a.claim = a.ready + flags;
    a.reserved_sms = int(std::min<int64_t>(plan.prepare_blocks,
                                           (chunk_mma::state_blocks(a, plan.state) + 1) / 2 * 2));
    HYLA_CUDA_CHECK(cudaMemsetAsync(a.ready, 0, (flags + 2) * sizeof(uint32_t), s));
  }
  if (a.max_chunks > 0 && a.H > 0) launch_prepare(a, plan.teams, plan.prepare_blocks, s);
  if (a.B > 0) launch_state(a, plan.state, s);
#ifdef HYLA_CHUNK_PROBE
  probe.write(s);
#endif
  return ok_status();
}

}  // namespace hyla::kernels::cuda
