// Names and parsing of the linear-attention backends (see linear_backends.h).
#include "model/linear_backends.h"

namespace hyla::model {

namespace {

constexpr std::string_view kDecodeNames = "auto, fused, ops";
constexpr std::string_view kPrefillNames = "auto, chunk, recurrent";

std::optional<LinearDecodeBackend> decode_from(std::string_view v) {
  if (v == "auto") return LinearDecodeBackend::kAuto;
  if (v == "fused") return LinearDecodeBackend::kFused;
  if (v == "ops") return LinearDecodeBackend::kOps;
  return std::nullopt;
}

std::optional<LinearPrefillBackend> prefill_from(std::string_view v) {
  if (v == "auto") return LinearPrefillBackend::kAuto;
  if (v == "chunk") return LinearPrefillBackend::kChunk;
  if (v == "recurrent") return LinearPrefillBackend::kRecurrent;
  return std::nullopt;
}

}  // namespace

std::string_view backend_name(LinearDecodeBackend b) {
  switch (b) {
    case LinearDecodeBackend::kAuto: return "auto";
    case LinearDecodeBackend::kFused: return "fused";
    case LinearDecodeBackend::kOps: return "ops";
  }
  return "?";
}

std::string_view backend_name(LinearPrefillBackend b) {
  switch (b) {
    case LinearPrefillBackend::kAuto: return "auto";
    case LinearPrefillBackend::kChunk: return "chunk";
    case LinearPrefillBackend::kRecurrent: return "recurrent";
  }
  return "?";
}

Result<LinearDecodeBackend> parse_linear_decode_backend(std::string_view flag,
                                                        std::string_view value) {
  if (const std::optional<LinearDecodeBackend> b = decode_from(value)) return *b;
  return invalid_argument(flag, " is '", value, "', expected one of ", kDecodeNames);
}

Result<LinearPrefillBackend> parse_linear_prefill_backend(std::string_view flag,
                                                          std::string_view value) {
  if (const std::optional<LinearPrefillBackend> b = prefill_from(value)) return *b;
  return invalid_argument(flag, " is '", value, "', expected one of ", kPrefillNames);
}

Result<LinearAttnBackends> parse_linear_attn_backends(const LinearAttnBackendFlags& flags) {
  const std::string_view all = flags.backend, decode = flags.decode, prefill = flags.prefill,
                         verify = flags.verify;
  LinearAttnBackends b;
  if (!all.empty()) {
    const std::optional<LinearDecodeBackend> d = decode_from(all);
    const std::optional<LinearPrefillBackend> p = prefill_from(all);
    if (!d && !p)
      return invalid_argument("--linear-attn-backend is '", all, "', expected one of auto (every ",
                              "phase), fused, ops (decode), chunk, recurrent (prefill)");
    if (d) b.decode = *d;
    if (p) b.prefill = *p;
  }
  if (!decode.empty()) {
    HYLA_ASSIGN_OR_RETURN(b.decode,
                          parse_linear_decode_backend("--linear-attn-decode-backend", decode));
  }
  if (!prefill.empty()) {
    HYLA_ASSIGN_OR_RETURN(b.prefill,
                          parse_linear_prefill_backend("--linear-attn-prefill-backend", prefill));
  }
  if (!verify.empty()) {
    HYLA_ASSIGN_OR_RETURN(b.verify,
                          parse_linear_decode_backend("--linear-attn-verify-backend", verify));
  }
  return b;
}

}  // namespace hyla::model
