// Errors: Status / Result<T> for anything input, files, config or memory can break; HYLA_CHECK for
// invariants (aborts with file:line and the message).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <utility>

namespace hyla {

/// Concatenates anything that streams into a string: str_cat("q: expected ", 3, " dims").
template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  ((os << args), ...);  // a comma fold: str_cat() with no arguments is ""
  return os.str();
}

enum class ErrorCode {
  kOk,
  kInvalidArgument,
  kOutOfRange,
  kUnsupported,
  kNotFound,
  kIo,
  kInternal,
  kOutOfMemory
};

/// The result of an operation that can fail: ok, or a code with a message that names the op,
/// the offending value and what was expected.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  std::string to_string() const { return ok() ? std::string("ok") : message_; }

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status ok_status() { return {}; }

template <typename... Args>
Status invalid_argument(const Args&... args) {
  return Status(ErrorCode::kInvalidArgument, str_cat(args...));
}
template <typename... Args>
Status out_of_range(const Args&... args) {
  return Status(ErrorCode::kOutOfRange, str_cat(args...));
}
template <typename... Args>
Status unsupported(const Args&... args) {
  return Status(ErrorCode::kUnsupported, str_cat(args...));
}
template <typename... Args>
Status internal_error(const Args&... args) {
  return Status(ErrorCode::kInternal, str_cat(args...));
}

[[noreturn]] inline void check_failed(const char* file, int line, const char* cond,
                                      const std::string& message) {
  std::fprintf(stderr, "%s:%d: HYLA_CHECK(%s) failed: %s\n", file, line, cond, message.c_str());
  std::abort();
}

/// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok())
      check_failed(__FILE__, __LINE__, "!status.ok()",
                   "a Result without a value needs an error Status");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  T& operator*() { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace hyla

/// Invariant check: aborts with file:line, the condition and a message built from the arguments.
#define HYLA_CHECK(cond, ...)                                               \
  do {                                                                      \
    if (!(cond))                                                            \
      ::hyla::check_failed(__FILE__, __LINE__, #cond,                       \
                           ::hyla::str_cat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)

#define HYLA_CONCAT_INNER(a, b) a##b
#define HYLA_CONCAT(a, b) HYLA_CONCAT_INNER(a, b)

/// `HYLA_ASSIGN_OR_RETURN(Tensor t, load(...));` declares t from a Result, or returns its error.
#define HYLA_ASSIGN_OR_RETURN(lhs, expr)                 \
  auto HYLA_CONCAT(hyla_result_, __LINE__) = (expr);     \
  if (!HYLA_CONCAT(hyla_result_, __LINE__).ok())         \
    return HYLA_CONCAT(hyla_result_, __LINE__).status(); \
  lhs = std::move(HYLA_CONCAT(hyla_result_, __LINE__)).value()

/// Returns the Status of `expr` from the enclosing function if it is not ok.
#define HYLA_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::hyla::Status hyla_status_ = (expr);        \
    if (!hyla_status_.ok()) return hyla_status_; \
  } while (0)
