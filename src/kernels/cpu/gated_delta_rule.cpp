// CPU bodies of the gated delta rule (declared in kernels/gated_delta_rule.h).
// Work is split over (sequence, value head) pairs; each pair keeps its state S^T [d_v, d_k] in
// fp32.
//
// recurrent: one pass over the state rows per token (decay, predict, write, read fused per row).
// chunk:     per chunk of n <= 64 tokens, with G_t = sum_{s<=t} g_s (inclusive, within the chunk):
//   A_kk[t, j] = beta_t <k_t exp(G_t), k_j exp(-G_j)>     (t > j; strictly lower)
//   A_qk[t, j] =        <q_t exp(G_t), k_j exp(-G_j)>     (t >= j)
//   (I + A_kk) [U | W] = [beta V | beta K exp(G)]          64x64 unit lower-triangular solve
//   Delta = U - W S0                                        errors of all n tokens at once
//   O     = (Q exp(G)) S0 + A_qk Delta
//   S     = exp(G_n) S0 + (K exp(G_n - G))^T Delta
// exp(G_t - G_j) is always formed as one exponent of a non-positive number (t >= j), never as a
// product exp(G_t) * exp(-G_j), so no intermediate overflows however strong the decay.
// KDA (per-channel G) computes the A blocks in 16-token sub-chunks: between sub-chunks via a
// reference point between j and t (both factors <= 1, one gemm), inside the diagonal sub-chunk
// pair by pair.
#include "kernels/gated_delta_rule.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cpu {

namespace {

constexpr int kChunk = kDeltaRuleChunk;
constexpr int kSubChunk = 16;

/// Geometry shared by both algorithms.
struct Shape {
  int64_t T, H, HV, d_k, d_v, B;
  int64_t group;     // HV / H: value heads per key head
  bool per_channel;  // KDA gate
  float scale;
};

Shape shape_of(const GatedDeltaRuleParams& p) {
  Shape s{};
  s.T = p.q.size(0);
  s.H = p.q.size(1);
  s.d_k = p.q.size(2);
  s.HV = p.v.size(1);
  s.d_v = p.v.size(2);
  s.B = p.cu_seqlens.size(0) - 1;
  s.group = s.HV / s.H;
  s.per_channel = p.g.ndim() == 3;
  s.scale = p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(float(s.d_k));
  return s;
}

/// Reads row x[t, h, :] (n elements, last dim contiguous) as fp32.
void load_row(const TensorView& x, int64_t t, int64_t h, int64_t n, float* dst) {
  const int64_t offset = t * x.stride(0) + h * x.stride(1);
  if (x.dtype() == DType::kF32) {
    std::copy_n(x.data<float>() + offset, n, dst);
  } else {
    const bf16* src = x.data<bf16>() + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
  }
}

void store_row(const TensorView& x, int64_t t, int64_t h, int64_t n, const float* src) {
  const int64_t offset = t * x.stride(0) + h * x.stride(1);
  if (x.dtype() == DType::kF32) {
    std::copy_n(src, n, x.data<float>() + offset);
  } else {
    bf16* dst = x.data<bf16>() + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
  }
}

/// Loads q or k row of key head h, l2-normalised (if asked) and multiplied by `mul`.
void load_qk(const TensorView& x, int64_t t, int64_t h, int64_t d_k, bool l2norm, float mul,
             float* dst) {
  load_row(x, t, h, d_k, dst);
  if (l2norm) {
    float ss = 0.0f;
    for (int64_t i = 0; i < d_k; ++i) ss += dst[i] * dst[i];
    mul /= std::sqrt(ss + kL2NormEps);
  }
  if (mul != 1.0f)
    for (int64_t i = 0; i < d_k; ++i) dst[i] *= mul;
}

/// Pool entry [slot, hv] (d_v x d_k) as a flat offset.
int64_t pool_offset(const TensorView& pool, int64_t slot, int64_t hv) {
  return slot * pool.stride(0) + hv * pool.stride(1);
}

void load_state(const GatedDeltaRuleParams& p, int64_t b, int64_t hv, int64_t n, float* st) {
  const int32_t slot = p.initial_slots.defined()
                           ? p.initial_slots.data<int32_t>()[b * p.initial_slots.stride(0)]
                           : -1;
  if (slot < 0) {
    std::fill_n(st, n, 0.0f);
    return;
  }
  const int64_t off = pool_offset(p.state_pool, slot, hv);
  if (p.state_pool.dtype() == DType::kF32) {
    std::copy_n(p.state_pool.data<float>() + off, n, st);
  } else {
    const bf16* src = p.state_pool.data<bf16>() + off;
    for (int64_t i = 0; i < n; ++i) st[i] = bf16_to_f32(src[i]);
  }
}

void store_state(const GatedDeltaRuleParams& p, int64_t b, int64_t hv, int64_t n, const float* st) {
  if (!p.final_slots.defined()) return;
  const int32_t slot = p.final_slots.data<int32_t>()[b * p.final_slots.stride(0)];
  if (slot < 0) return;
  const int64_t off = pool_offset(p.state_pool, slot, hv);
  if (p.state_pool.dtype() == DType::kF32) {
    std::copy_n(st, n, p.state_pool.data<float>() + off);
  } else {
    bf16* dst = p.state_pool.data<bf16>() + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(st[i]);
  }
}

/// Runs body(b, hv) for every (sequence, value head) pair in parallel.
template <typename Body>
void for_each_sequence_head(const Shape& s, Body&& body) {
  parallel_for(s.B * s.HV, [&](int64_t i) { body(i / s.HV, i % s.HV); });
}

}  // namespace

void gated_delta_rule_recurrent(const GatedDeltaRuleParams& p) {
  const Shape s = shape_of(p);
  const int32_t* cu = p.cu_seqlens.data<int32_t>();
  const int64_t cu_stride = p.cu_seqlens.stride(0);
  const int64_t d_k = s.d_k, d_v = s.d_v;
  for_each_sequence_head(s, [&](int64_t b, int64_t hv) {
    const int64_t kh = hv / s.group;
    const auto dk = static_cast<size_t>(d_k), dv = static_cast<size_t>(d_v);
    std::vector<float> st(dv * dk), q(dk), k(dk), v(dv), decay(dk), o(dv);
    load_state(p, b, hv, d_v * d_k, st.data());
    for (int64_t t = cu[b * cu_stride]; t < cu[(b + 1) * cu_stride]; ++t) {
      load_qk(p.q, t, kh, d_k, p.use_qk_l2norm, s.scale, q.data());
      load_qk(p.k, t, kh, d_k, p.use_qk_l2norm, 1.0f, k.data());
      load_row(p.v, t, hv, d_v, v.data());
      const float beta = p.beta.data<float>()[t * p.beta.stride(0) + hv * p.beta.stride(1)];
      if (s.per_channel) {
        const float* g = p.g.data<float>() + t * p.g.stride(0) + hv * p.g.stride(1);
#pragma omp simd
        for (int64_t i = 0; i < d_k; ++i) decay[size_t(i)] = exp_approx(g[i]);
      } else {
        std::fill(decay.begin(), decay.end(),
                  std::exp(p.g.data<float>()[t * p.g.stride(0) + hv * p.g.stride(1)]));
      }
      // per state row i_v (one value channel, d_k contiguous):
      //   row *= decay;  delta = beta (v - <row, k>);  row += delta k;  o = <row, q>
      for (int64_t i_v = 0; i_v < d_v; ++i_v) {
        float* row = st.data() + i_v * d_k;
        float v_hat = 0.0f;
#pragma omp simd reduction(+ : v_hat)
        for (int64_t i = 0; i < d_k; ++i) {
          row[i] *= decay[size_t(i)];
          v_hat += row[i] * k[size_t(i)];
        }
        const float delta = beta * (v[size_t(i_v)] - v_hat);
        float out = 0.0f;
#pragma omp simd reduction(+ : out)
        for (int64_t i = 0; i < d_k; ++i) {
          row[i] += delta * k[size_t(i)];
          out += row[i] * q[size_t(i)];
        }
        o[size_t(i_v)] = out;
      }
      store_row(p.o, t, hv, d_v, o.data());
      if (p.step_states.defined())
        std::copy(st.begin(), st.end(), p.step_states.data<float>() + (t * s.HV + hv) * d_v * d_k);
    }
    store_state(p, b, hv, d_v * d_k, st.data());
  });
}

namespace {

/// Scratch buffers of one (sequence, head) task of the chunk algorithm.
struct ChunkScratch {
  int64_t d_k, d_v, ld_rhs;
  std::vector<float> st;    // [d_v, d_k]  S^T
  std::vector<float> q;     // [C, d_k]    normalised, scaled q
  std::vector<float> k;     // [C, d_k]    normalised k
  std::vector<float> G;     // [C] or [C, d_k]  inclusive cumulative log decay
  std::vector<float> beta;  // [C]
  std::vector<float> qg;    // [C, d_k]    q exp(G)
  std::vector<float> kd;    // [C, d_k]    k exp(G_n - G)
  std::vector<float> kl;    // [C, d_k]    KDA: k exp(G - G_ref) (left factor)
  std::vector<float> kr;    // [C, d_k]    KDA: k exp(G_ref - G) (right factor)
  std::vector<float> akk;   // [C, C]
  std::vector<float> aqk;   // [C, C]
  std::vector<float> rhs;   // [C, d_v + d_k]: [U | W], U turns into Delta
  std::vector<float> o;     // [C, d_v]

  ChunkScratch(int64_t dk, int64_t dv, bool per_channel)
      : d_k(dk),
        d_v(dv),
        ld_rhs(dv + dk),
        st(size_t(dv * dk)),
        q(size_t(kChunk * dk)),
        k(size_t(kChunk * dk)),
        G(size_t(per_channel ? kChunk * dk : kChunk)),
        beta(size_t(kChunk)),
        qg(size_t(kChunk * dk)),
        kd(size_t(kChunk * dk)),
        kl(size_t(per_channel ? kChunk * dk : 0)),
        kr(size_t(per_channel ? kChunk * dk : 0)),
        akk(size_t(kChunk * kChunk)),
        aqk(size_t(kChunk * kChunk)),
        rhs(size_t(kChunk * (dv + dk))),
        o(size_t(kChunk * dv)) {}
};

/// GDN: A_kk and A_qk from K K^T and Q K^T scaled by exp(G_t - G_j) (scalar per token).
void chunk_attention_scalar(ChunkScratch& w, int n) {
  const int64_t d_k = w.d_k;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, int(d_k), 1.0f, w.k.data(), int(d_k),
              w.k.data(), int(d_k), 0.0f, w.akk.data(), kChunk);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, int(d_k), 1.0f, w.q.data(), int(d_k),
              w.k.data(), int(d_k), 0.0f, w.aqk.data(), kChunk);
  for (int t = 0; t < n; ++t) {
    float* akk = w.akk.data() + t * kChunk;
    float* aqk = w.aqk.data() + t * kChunk;
    for (int j = 0; j < t; ++j) {
      const float decay = std::exp(w.G[size_t(t)] - w.G[size_t(j)]);
      akk[j] *= w.beta[size_t(t)] * decay;
      aqk[j] *= decay;
    }
    for (int j = t; j < n; ++j) akk[j] = 0.0f;
    for (int j = t + 1; j < n; ++j) aqk[j] = 0.0f;
  }
}

/// KDA: A_kk and A_qk with per-channel decay exp(G_t[c] - G_j[c]), one 16-row sub-chunk at a time.
/// Rows t of sub-chunk [s0, e) use the reference point r = s0 and one gemm over columns j:
///   <k_t exp(G_t - G_r), k_j exp(G_r - G_j)>,  exp(G_t - G_r) <= 1,
///   exp(G_r - G_j) <= 1 for j < s0 and <= exp(G_r - G_{e-1}) for j in the sub-chunk.
/// When that last bound could overflow (decay stronger than kMaxFactorExponent inside 16 tokens),
/// the diagonal sub-chunk is computed pair by pair instead.
void chunk_attention_per_channel(ChunkScratch& w, int n) {
  constexpr float kMaxFactorExponent = 60.0f;  // e^60 ~ 1e26: far from fp32's 3.4e38 limit
  const int64_t d_k = w.d_k;
  for (int s0 = 0; s0 < n; s0 += kSubChunk) {
    const int e = std::min(s0 + kSubChunk, n);
    const float* Gr = w.G.data() + s0 * d_k;
    const float* Glast = w.G.data() + (e - 1) * d_k;
    float range = 0.0f;
    for (int64_t c = 0; c < d_k; ++c) range = std::max(range, Gr[c] - Glast[c]);
    const bool factor_diagonal = range <= kMaxFactorExponent;
    const int j_end = factor_diagonal ? e : s0;
    for (int t = s0; t < e; ++t) {
      const float* Gt = w.G.data() + t * d_k;
      const float* kt = w.k.data() + t * d_k;
      const float* qt = w.q.data() + t * d_k;
      float* kl = w.kl.data() + t * d_k;
      float* ql = w.qg.data() + t * d_k;  // qg is free until chunk_step fills it
#pragma omp simd
      for (int64_t c = 0; c < d_k; ++c) {
        const float f = exp_approx(Gt[c] - Gr[c]);
        kl[c] = kt[c] * f;
        ql[c] = qt[c] * f;
      }
    }
    for (int j = 0; j < j_end; ++j) {
      const float* Gj = w.G.data() + j * d_k;
      const float* kj = w.k.data() + j * d_k;
      float* kr = w.kr.data() + j * d_k;
#pragma omp simd
      for (int64_t c = 0; c < d_k; ++c) kr[c] = kj[c] * exp_approx(Gr[c] - Gj[c]);
    }
    const int m = e - s0;
    if (j_end > 0) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, j_end, int(d_k), 1.0f,
                  w.kl.data() + s0 * d_k, int(d_k), w.kr.data(), int(d_k), 0.0f,
                  w.akk.data() + s0 * kChunk, kChunk);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, j_end, int(d_k), 1.0f,
                  w.qg.data() + s0 * d_k, int(d_k), w.kr.data(), int(d_k), 0.0f,
                  w.aqk.data() + s0 * kChunk, kChunk);
    }
    if (!factor_diagonal) {
      // Pair by pair: every exponent is G_t - G_j <= 0.
      for (int t = s0; t < e; ++t) {
        const float* Gt = w.G.data() + t * d_k;
        const float* qt = w.q.data() + t * d_k;
        const float* kt = w.k.data() + t * d_k;
        for (int j = s0; j <= t; ++j) {
          const float* Gj = w.G.data() + j * d_k;
          const float* kj = w.k.data() + j * d_k;
          float sk = 0.0f, sq = 0.0f;
#pragma omp simd reduction(+ : sk, sq)
          for (int64_t c = 0; c < d_k; ++c) {
            const float kjd = kj[c] * exp_approx(Gt[c] - Gj[c]);
            sk += kt[c] * kjd;
            sq += qt[c] * kjd;
          }
          w.akk[size_t(t * kChunk + j)] = sk;
          w.aqk[size_t(t * kChunk + j)] = sq;
        }
      }
    }
    // Masks: A_kk strictly lower and scaled by beta_t; A_qk lower including the diagonal.
    for (int t = s0; t < e; ++t) {
      float* akk = w.akk.data() + t * kChunk;
      float* aqk = w.aqk.data() + t * kChunk;
      for (int j = 0; j < t; ++j) akk[j] *= w.beta[size_t(t)];
      for (int j = t; j < n; ++j) akk[j] = 0.0f;
      for (int j = t + 1; j < n; ++j) aqk[j] = 0.0f;
    }
  }
}

/// One chunk of n tokens starting at token t0 for value head hv (key head kh); updates w.st.
void chunk_step(const GatedDeltaRuleParams& p, const Shape& s, ChunkScratch& w, int64_t t0, int n,
                int64_t hv, int64_t kh) {
  const int64_t d_k = s.d_k, d_v = s.d_v, ld = w.ld_rhs;
  // Load q, k (normalised), v * beta into U, and the inclusive cumulative gate G.
  for (int t = 0; t < n; ++t) {
    load_qk(p.q, t0 + t, kh, d_k, p.use_qk_l2norm, s.scale, w.q.data() + t * d_k);
    load_qk(p.k, t0 + t, kh, d_k, p.use_qk_l2norm, 1.0f, w.k.data() + t * d_k);
    const float beta = p.beta.data<float>()[(t0 + t) * p.beta.stride(0) + hv * p.beta.stride(1)];
    w.beta[size_t(t)] = beta;
    float* u = w.rhs.data() + t * ld;
    load_row(p.v, t0 + t, hv, d_v, u);
    for (int64_t i = 0; i < d_v; ++i) u[i] *= beta;
    if (s.per_channel) {
      const float* g = p.g.data<float>() + (t0 + t) * p.g.stride(0) + hv * p.g.stride(1);
      float* G = w.G.data() + t * d_k;
      for (int64_t c = 0; c < d_k; ++c) G[c] = g[c] + (t ? G[c - d_k] : 0.0f);
    } else {
      const float g = p.g.data<float>()[(t0 + t) * p.g.stride(0) + hv * p.g.stride(1)];
      w.G[size_t(t)] = g + (t ? w.G[size_t(t - 1)] : 0.0f);
    }
  }

  if (s.per_channel) {
    chunk_attention_per_channel(w, n);
  } else {
    chunk_attention_scalar(w, n);
  }

  // W = beta K exp(G) (right half of rhs), Qg = Q exp(G), Kd = K exp(G_n - G).
  for (int t = 0; t < n; ++t) {
    const float* kt = w.k.data() + t * d_k;
    const float* qt = w.q.data() + t * d_k;
    float* wt = w.rhs.data() + t * ld + d_v;
    float* qg = w.qg.data() + t * d_k;
    float* kd = w.kd.data() + t * d_k;
    const float beta = w.beta[size_t(t)];
    if (s.per_channel) {
      const float* G = w.G.data() + t * d_k;
      const float* Gn = w.G.data() + (n - 1) * d_k;
#pragma omp simd
      for (int64_t c = 0; c < d_k; ++c) {
        const float e = exp_approx(G[c]);
        wt[c] = beta * kt[c] * e;
        qg[c] = qt[c] * e;
        kd[c] = kt[c] * exp_approx(Gn[c] - G[c]);
      }
    } else {
      const float e = std::exp(w.G[size_t(t)]);
      const float en = std::exp(w.G[size_t(n - 1)] - w.G[size_t(t)]);
      for (int64_t c = 0; c < d_k; ++c) {
        wt[c] = beta * kt[c] * e;
        qg[c] = qt[c] * e;
        kd[c] = kt[c] * en;
      }
    }
  }

  // (I + A_kk) [U | W] = [beta V | beta K exp(G)]
  cblas_strsm(CblasRowMajor, CblasLeft, CblasLower, CblasNoTrans, CblasUnit, n, int(ld), 1.0f,
              w.akk.data(), kChunk, w.rhs.data(), int(ld));
  // Delta = U - W S0, with S0 = st^T:  U -= W st^T
  float* delta = w.rhs.data();
  const float* W = w.rhs.data() + d_v;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, int(d_v), int(d_k), -1.0f, W, int(ld),
              w.st.data(), int(d_k), 1.0f, delta, int(ld));
  // O = Qg S0 + A_qk Delta
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, int(d_v), int(d_k), 1.0f, w.qg.data(),
              int(d_k), w.st.data(), int(d_k), 0.0f, w.o.data(), int(d_v));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, int(d_v), n, 1.0f, w.aqk.data(), kChunk,
              delta, int(ld), 1.0f, w.o.data(), int(d_v));
  // S^T = S0^T diag(exp(G_n)) + Delta^T Kd
  if (s.per_channel) {
    const float* Gn = w.G.data() + (n - 1) * d_k;
    std::vector<float>& decay = w.kl;  // free again: reuse as [d_k] buffer
#pragma omp simd
    for (int64_t c = 0; c < d_k; ++c) decay[size_t(c)] = exp_approx(Gn[c]);
    for (int64_t i_v = 0; i_v < d_v; ++i_v)
      for (int64_t c = 0; c < d_k; ++c) w.st[size_t(i_v * d_k + c)] *= decay[size_t(c)];
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(d_v), int(d_k), n, 1.0f, delta,
                int(ld), w.kd.data(), int(d_k), 1.0f, w.st.data(), int(d_k));
  } else {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(d_v), int(d_k), n, 1.0f, delta,
                int(ld), w.kd.data(), int(d_k), std::exp(w.G[size_t(n - 1)]), w.st.data(),
                int(d_k));
  }
  for (int t = 0; t < n; ++t) store_row(p.o, t0 + t, hv, d_v, w.o.data() + t * d_v);
}

}  // namespace

void gated_delta_rule_chunk(const GatedDeltaRuleParams& p) {
  const Shape s = shape_of(p);
  const int32_t* cu = p.cu_seqlens.data<int32_t>();
  const int64_t cu_stride = p.cu_seqlens.stride(0);
  // Index of each sequence's first boundary state in chunk_states (a prefix sum, computed once).
  std::vector<int64_t> first_boundary(size_t(s.B), 0);
  for (int64_t b = 1; b < s.B; ++b)
    first_boundary[size_t(b)] =
        first_boundary[size_t(b - 1)] + (cu[b * cu_stride] - cu[(b - 1) * cu_stride]) / kChunk;
  for_each_sequence_head(s, [&](int64_t b, int64_t hv) {
    const int64_t kh = hv / s.group;
    ChunkScratch w(s.d_k, s.d_v, s.per_channel);
    load_state(p, b, hv, s.d_v * s.d_k, w.st.data());
    const int64_t begin = cu[b * cu_stride], end = cu[(b + 1) * cu_stride];
    int64_t boundary = first_boundary[size_t(b)];
    for (int64_t t0 = begin; t0 < end; t0 += kChunk) {
      const int n = int(std::min<int64_t>(kChunk, end - t0));
      chunk_step(p, s, w, t0, n, hv, kh);
      if (n == kChunk && p.chunk_states.defined()) {
        std::copy(w.st.begin(), w.st.end(),
                  p.chunk_states.data<float>() + (boundary * s.HV + hv) * s.d_v * s.d_k);
        ++boundary;
      }
    }
    store_state(p, b, hv, s.d_v * s.d_k, w.st.data());
  });
}

}  // namespace hyla::kernels::cpu
