// Status and Result<T>: the one error type of tensord.
//
// Codes are gRPC's (same numbers), so a Status maps 1:1 onto the wire and onto Python
// exceptions. Messages say what was wrong, with the values ("Conv: input has 3 channels,
// weight expects 4 (node 'conv1')"). Bad input from a client or a file is always a Status,
// never an assert or an exception.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tensord {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// "INVALID_ARGUMENT", "NOT_FOUND", ... (gRPC's spelling).
const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context` + ": ".
  Status with_context(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }

// A value or an error. Accessing value() of an error Result is a programming error (asserts).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result constructed from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  T& value() & {
    assert(ok());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(ok());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(ok());
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tensord

#define TD_CONCAT_INNER_(a, b) a##b
#define TD_CONCAT_(a, b) TD_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (a Status) is not OK.
#define TD_RETURN_IF_ERROR(expr)                          \
  do {                                                    \
    ::tensord::Status td_status_ = (expr);                \
    if (!td_status_.ok()) return td_status_;              \
  } while (0)

// `TD_ASSIGN_OR_RETURN(auto x, f());` — declares/assigns lhs from a Result, or returns its error.
#define TD_ASSIGN_OR_RETURN(lhs, expr) \
  TD_ASSIGN_OR_RETURN_IMPL_(TD_CONCAT_(td_result_, __LINE__), lhs, expr)
#define TD_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
