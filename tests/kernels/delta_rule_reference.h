// Float64 references for the gated delta rule tests (header-only).
//   delta_rule_reference:   the seed's per-token recurrence (gated_delta_rule_ref; KDA variant),
//                           one value head at a time: decay, predict, error, write, read.
//   delta_rule_matrix_form: the seed's parallel form (矩阵形式) with the lower-triangular inverse.
// States use the pool layout [HV, d_v, d_k] (S^T, d_k contiguous), activations [T, heads, dim].
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace hyla::testing {

/// The inputs of one gated-delta-rule call in float64, row-major, already rounded to what the
/// kernel reads (bf16 / f32), so the reference sees exactly the kernel's numbers.
struct DeltaRuleInputs {
  int64_t T = 0, H = 0, HV = 0, d_k = 0, d_v = 0;
  bool per_channel_gate = false;    ///< KDA: g [T, HV, d_k]; GDN: g [T, HV]
  std::vector<double> q, k;         ///< [T, H, d_k]
  std::vector<double> v;            ///< [T, HV, d_v]
  std::vector<double> g;            ///< [T, HV] or [T, HV, d_k], log-space decay
  std::vector<double> beta;         ///< [T, HV]
  std::vector<int32_t> cu_seqlens;  ///< [B + 1]
  bool use_qk_l2norm = true;
  double scale = 0;  ///< 0 = d_k^-1/2
  /// Per sequence: initial state [HV, d_v, d_k]; empty = the zero state.
  std::vector<std::vector<double>> initial_states;

  int64_t num_seqs() const { return int64_t(cu_seqlens.size()) - 1; }
  int64_t state_size() const { return HV * d_v * d_k; }
};

struct DeltaRuleOutputs {
  std::vector<double> o;                          ///< [T, HV, d_v]
  std::vector<std::vector<double>> final_states;  ///< per sequence [HV, d_v, d_k]
  std::vector<double> step_states;  ///< [T, HV, d_v, d_k], the state after each token (if kept)
};

namespace delta_rule_detail {

/// x / sqrt(sum x^2 + 1e-6) when l2norm is on (the kernel's eps), then times `scale`.
inline std::vector<double> normalized(const double* x, int64_t n, bool l2norm, double scale) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += x[i] * x[i];
  const double inv = l2norm ? 1.0 / std::sqrt(sum_sq + 1e-6) : 1.0;
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = x[i] * inv * scale;
  return out;
}

inline double query_scale(const DeltaRuleInputs& in) {
  return in.scale == 0 ? 1.0 / std::sqrt(double(in.d_k)) : in.scale;
}

/// Decay of key channel i_k of value head h at token t (GDN: the same for every channel).
inline double gate(const DeltaRuleInputs& in, int64_t t, int64_t h, int64_t i_k) {
  return in.per_channel_gate ? in.g[size_t((t * in.HV + h) * in.d_k + i_k)]
                             : in.g[size_t(t * in.HV + h)];
}

}  // namespace delta_rule_detail

/// The recurrence, token by token, in float64. Value head h reads key head h / (HV / H).
inline DeltaRuleOutputs delta_rule_reference(const DeltaRuleInputs& in, bool keep_step_states) {
  using namespace delta_rule_detail;
  const int64_t T = in.T, HV = in.HV, d_k = in.d_k, d_v = in.d_v, group = in.HV / in.H;
  DeltaRuleOutputs out;
  out.o.assign(size_t(T * HV * d_v), 0.0);
  if (keep_step_states) out.step_states.assign(size_t(T * in.state_size()), 0.0);
  for (int64_t b = 0; b < in.num_seqs(); ++b) {
    std::vector<double> state = in.initial_states[size_t(b)];  // [HV, d_v, d_k]
    if (state.empty()) state.assign(size_t(in.state_size()), 0.0);
    for (int64_t t = in.cu_seqlens[size_t(b)]; t < in.cu_seqlens[size_t(b) + 1]; ++t) {
      for (int64_t h = 0; h < HV; ++h) {
        const int64_t h_k = h / group;
        const std::vector<double> k =
            normalized(&in.k[size_t((t * in.H + h_k) * d_k)], d_k, in.use_qk_l2norm, 1.0);
        const std::vector<double> q = normalized(&in.q[size_t((t * in.H + h_k) * d_k)], d_k,
                                                 in.use_qk_l2norm, query_scale(in));
        const double beta = in.beta[size_t(t * HV + h)];
        double* s = &state[size_t(h * d_v * d_k)];  // s[i_v * d_k + i_k] = S[i_k][i_v]
        // 1. decay: S' = Diag(exp(g_t)) S
        for (int64_t i_v = 0; i_v < d_v; ++i_v)
          for (int64_t i_k = 0; i_k < d_k; ++i_k)
            s[i_v * d_k + i_k] *= std::exp(gate(in, t, h, i_k));
        for (int64_t i_v = 0; i_v < d_v; ++i_v) {
          // 2. predict with the decayed state: v_hat = k S'
          double v_hat = 0;
          for (int64_t i_k = 0; i_k < d_k; ++i_k) v_hat += k[size_t(i_k)] * s[i_v * d_k + i_k];
          // 3. error: delta = beta (v - v_hat)
          const double delta = beta * (in.v[size_t((t * HV + h) * d_v + i_v)] - v_hat);
          // 4. write: S = S' + k^T delta
          for (int64_t i_k = 0; i_k < d_k; ++i_k) s[i_v * d_k + i_k] += k[size_t(i_k)] * delta;
          // 5. read: o = q S
          double o = 0;
          for (int64_t i_k = 0; i_k < d_k; ++i_k) o += q[size_t(i_k)] * s[i_v * d_k + i_k];
          out.o[size_t((t * HV + h) * d_v + i_v)] = o;
        }
      }
      if (keep_step_states)
        std::copy(state.begin(), state.end(), out.step_states.begin() + t * in.state_size());
    }
    out.final_states.push_back(std::move(state));
  }
  return out;
}

/// The parallel form of each sequence and value head, with the recurrence unrolled (seed:
/// 矩阵形式, with beta and an initial state S_0 kept explicit). For tokens i, j of one sequence:
///   Gamma_{i,j} = prod_{tau=j+1..i} alpha_tau (per key channel for KDA), b_i = prod_{tau<=i}
///   alpha_tau A   = I + strictly_lower( diag(beta) (K K^T (.) Gamma) )    (KDA: k_i Diag(Gamma_ij)
///   k_j^T) U   = A^-1 diag(beta) V,   W = A^-1 diag(beta) (K (.) b)    the WY/UT representation
///   Delta = U - W S_0                                           the per-token errors delta_t
///   O   = (Q (.) b) S_0 + (Q K^T (.) Gamma (.) M) Delta          M: causal mask incl. the diagonal
///   S_T = Diag(b_T) S_0 + K^T Diag(Gamma_{T,.}) Delta
/// A^-1 is formed explicitly by forward substitution on the identity. `use_inverse = false`
/// replaces A^-1 by I (drops the delta-rule coupling), so a test can show the inverse matters.
inline DeltaRuleOutputs delta_rule_matrix_form(const DeltaRuleInputs& in, bool use_inverse = true) {
  using namespace delta_rule_detail;
  const int64_t HV = in.HV, d_k = in.d_k, d_v = in.d_v, group = in.HV / in.H;
  DeltaRuleOutputs out;
  out.o.assign(size_t(in.T * HV * d_v), 0.0);
  for (int64_t b = 0; b < in.num_seqs(); ++b) {
    const int64_t t0 = in.cu_seqlens[size_t(b)];
    const int64_t n = in.cu_seqlens[size_t(b) + 1] - t0;
    std::vector<double> final_state(size_t(in.state_size()), 0.0);
    for (int64_t h = 0; h < HV; ++h) {
      const int64_t h_k = h / group;
      // Normalised keys / queries and log-decays of this sequence: [n, d_k].
      std::vector<double> K(size_t(n * d_k)), Q(size_t(n * d_k)), G(size_t(n * d_k));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t t = t0 + i;
        const std::vector<double> k =
            normalized(&in.k[size_t((t * in.H + h_k) * d_k)], d_k, in.use_qk_l2norm, 1.0);
        const std::vector<double> q = normalized(&in.q[size_t((t * in.H + h_k) * d_k)], d_k,
                                                 in.use_qk_l2norm, query_scale(in));
        for (int64_t c = 0; c < d_k; ++c) {
          K[size_t(i * d_k + c)] = k[size_t(c)];
          Q[size_t(i * d_k + c)] = q[size_t(c)];
          G[size_t(i * d_k + c)] = gate(in, t, h, c);
        }
      }
      // Cumulative log decay: cum[i][c] = sum_{tau <= i} g_tau, so Gamma_ij = exp(cum_i - cum_j).
      std::vector<double> cum(size_t(n * d_k));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t c = 0; c < d_k; ++c)
          cum[size_t(i * d_k + c)] =
              G[size_t(i * d_k + c)] + (i ? cum[size_t((i - 1) * d_k + c)] : 0.0);
      auto decay_between = [&](int64_t i, int64_t j, int64_t c) {  // i >= j
        return std::exp(cum[size_t(i * d_k + c)] - cum[size_t(j * d_k + c)]);
      };
      auto decayed_dot = [&](const std::vector<double>& X, int64_t i,
                             int64_t j) {  // x_i Diag(Gamma_ij) k_j^T
        double sum = 0;
        for (int64_t c = 0; c < d_k; ++c)
          sum += X[size_t(i * d_k + c)] * decay_between(i, j, c) * K[size_t(j * d_k + c)];
        return sum;
      };
      auto beta_of = [&](int64_t i) { return in.beta[size_t((t0 + i) * HV + h)]; };

      // A = I + strictly_lower(diag(beta) K K^T (.) Gamma), then A^-1 column by column.
      std::vector<double> A(size_t(n * n), 0.0), A_inv(size_t(n * n), 0.0);
      for (int64_t i = 0; i < n; ++i) {
        A[size_t(i * n + i)] = 1.0;
        for (int64_t j = 0; j < i; ++j) A[size_t(i * n + j)] = beta_of(i) * decayed_dot(K, i, j);
      }
      for (int64_t col = 0; col < n; ++col) {
        for (int64_t i = 0; i < n; ++i) {
          double x = i == col ? 1.0 : 0.0;
          if (use_inverse)
            for (int64_t j = 0; j < i; ++j) x -= A[size_t(i * n + j)] * A_inv[size_t(j * n + col)];
          A_inv[size_t(i * n + col)] = x;
        }
      }

      // S_0 of this head as S[c][i_v] (math layout) from the pool layout [d_v, d_k].
      const std::vector<double>& init = in.initial_states[size_t(b)];
      auto s0 = [&](int64_t c, int64_t i_v) {
        return init.empty() ? 0.0 : init[size_t((h * d_v + i_v) * d_k + c)];
      };
      // U = A^-1 diag(beta) V [n, d_v];  W = A^-1 diag(beta) (K (.) b) [n, d_k].
      std::vector<double> U(size_t(n * d_v), 0.0), W(size_t(n * d_k), 0.0);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j <= i; ++j) {
          const double a = A_inv[size_t(i * n + j)] * beta_of(j);
          for (int64_t i_v = 0; i_v < d_v; ++i_v)
            U[size_t(i * d_v + i_v)] += a * in.v[size_t(((t0 + j) * HV + h) * d_v + i_v)];
          for (int64_t c = 0; c < d_k; ++c)
            W[size_t(i * d_k + c)] +=
                a * K[size_t(j * d_k + c)] * std::exp(cum[size_t(j * d_k + c)]);
        }
      }
      // Delta = U - W S_0.
      std::vector<double> Delta = U;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t i_v = 0; i_v < d_v; ++i_v)
          for (int64_t c = 0; c < d_k; ++c)
            Delta[size_t(i * d_v + i_v)] -= W[size_t(i * d_k + c)] * s0(c, i_v);
      // O = (Q (.) b) S_0 + (Q K^T (.) Gamma (.) M) Delta.
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t i_v = 0; i_v < d_v; ++i_v) {
          double o = 0;
          for (int64_t c = 0; c < d_k; ++c)
            o += Q[size_t(i * d_k + c)] * std::exp(cum[size_t(i * d_k + c)]) * s0(c, i_v);
          for (int64_t j = 0; j <= i; ++j) o += decayed_dot(Q, i, j) * Delta[size_t(j * d_v + i_v)];
          out.o[size_t(((t0 + i) * HV + h) * d_v + i_v)] = o;
        }
      }
      // S_T = Diag(b_T) S_0 + K^T Diag(Gamma_{T,.}) Delta, stored as S^T.
      for (int64_t i_v = 0; i_v < d_v; ++i_v) {
        for (int64_t c = 0; c < d_k; ++c) {
          double s = n ? std::exp(cum[size_t((n - 1) * d_k + c)]) * s0(c, i_v) : s0(c, i_v);
          for (int64_t j = 0; j < n; ++j)
            s += decay_between(n - 1, j, c) * K[size_t(j * d_k + c)] * Delta[size_t(j * d_v + i_v)];
          final_state[size_t((h * d_v + i_v) * d_k + c)] = s;
        }
      }
    }
    out.final_states.push_back(std::move(final_state));
  }
  return out;
}

}  // namespace hyla::testing
