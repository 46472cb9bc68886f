// Which implementation runs each phase of a linear-attention (GDN / KDA) layer, chosen per model
// (Model::set_linear_backends) and read by the layers through LinearMemory::backends.
//   decode  (every sequence has one new token): fused = kernels::gated_delta_rule_decode (conv,
//           gates, l2norm, rule and gated norm in one call); ops = the separate ops
//           (causal_conv1d_update, gates, gated_delta_rule_recurrent, gated_rmsnorm); auto = fused
//           where the fused CUDA kernel takes the shapes (use_fused_decode), ops elsewhere.
//   prefill (any other step): chunk = gated_delta_rule_chunk; recurrent =
//           gated_delta_rule_recurrent over the whole sequence; auto = gated_delta_rule_extend's
//           per-device choice.
//   verify  (speculative verify): a decode backend; unset = the decode one.
// An explicit choice that cannot serve a shape is an error at that forward call, never a
// fallback. Flags (hyla generate / bench): --linear-attn-decode-backend auto|fused|ops,
// --linear-attn-prefill-backend auto|chunk|recurrent, --linear-attn-verify-backend auto|fused|ops,
// and --linear-attn-backend NAME, which sets every phase whose list holds NAME (auto: all three;
// fused / ops: decode; chunk / recurrent: prefill); the per-phase flags override it.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"

namespace hyla::model {

enum class LinearDecodeBackend { kAuto, kFused, kOps };
enum class LinearPrefillBackend { kAuto, kChunk, kRecurrent };

struct LinearAttnBackends {
  LinearDecodeBackend decode = LinearDecodeBackend::kAuto;
  LinearPrefillBackend prefill = LinearPrefillBackend::kAuto;
  std::optional<LinearDecodeBackend> verify;  ///< unset: follows decode

  LinearDecodeBackend verify_backend() const { return verify.value_or(decode); }
  bool operator==(const LinearAttnBackends&) const = default;
};

std::string_view backend_name(LinearDecodeBackend b);
std::string_view backend_name(LinearPrefillBackend b);

/// "auto" | "fused" | "ops". Errors name `flag`, the value and the accepted names.
Result<LinearDecodeBackend> parse_linear_decode_backend(std::string_view flag,
                                                        std::string_view value);
/// "auto" | "chunk" | "recurrent". Errors name `flag`, the value and the accepted names.
Result<LinearPrefillBackend> parse_linear_prefill_backend(std::string_view flag,
                                                          std::string_view value);

/// The command-line flags' values as given; empty = not given.
struct LinearAttnBackendFlags {
  std::string backend;  ///< --linear-attn-backend
  std::string decode;   ///< --linear-attn-decode-backend
  std::string prefill;  ///< --linear-attn-prefill-backend
  std::string verify;   ///< --linear-attn-verify-backend
};

/// The flags as one choice: `backend` sets every phase whose accepted names hold it, then decode /
/// prefill / verify override their phase. Errors name the flag, its value and the accepted names.
Result<LinearAttnBackends> parse_linear_attn_backends(const LinearAttnBackendFlags& flags);

}  // namespace hyla::model
