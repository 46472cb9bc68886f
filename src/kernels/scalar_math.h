// Scalar activations shared by CPU and CUDA bodies (fp32 in, fp32 out).
// Each matches the PyTorch function named beside it.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define HYLA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define HYLA_HOST_DEVICE inline
#endif

namespace hyla::kernels {

/// torch.sigmoid
HYLA_HOST_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
/// torch.nn.functional.softplus(x, beta=1, threshold=20): x above the threshold passes through.
HYLA_HOST_DEVICE float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
/// torch.nn.functional.silu: x * sigmoid(x)
HYLA_HOST_DEVICE float silu(float x) { return x / (1.0f + expf(-x)); }

/// The log-decay g of a GDN / KDA gate from x = gate input + dt_bias and A = exp(A_log):
/// -A softplus(x), or with KDA's safe gate (safe, lower_bound < 0) lower_bound sigmoid(A x).
HYLA_HOST_DEVICE float gate_log_decay(float A, float x, bool safe, float lower_bound) {
  return safe ? lower_bound * sigmoid(A * x) : -A * softplus(x);
}

/// Epsilon inside the rsqrt of every q/k L2 normalisation (fla / HF l2norm).
inline constexpr float kL2NormEps = 1e-6f;

}  // namespace hyla::kernels
