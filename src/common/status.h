// Status and Result<T>: errors as values.
//
// Every internal function that can fail returns Status (or Result<T>); the code is an
// ncclResult_t so the C API maps it one to one. Nothing throws across extern "C".
// The message is the human cause (syscall, errno, peer, what was awaited) and becomes
// ncclGetLastError()'s text at the API boundary.
#pragma once

#include <cstdarg>
#include <string>
#include <utility>

#include "snccl/nccl.h"

namespace snccl {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ncclResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == ncclSuccess; }
  ncclResult_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prepends context ("while connecting to rank 3: ") to the message, keeping the code.
  Status& addContext(const std::string& context) {
    message_ = context + ": " + message_;
    return *this;
  }

 private:
  ncclResult_t code_ = ncclSuccess;
  std::string message_;
};

inline Status OkStatus() { return Status(); }

// printf-style constructors for the common codes.
Status Error(ncclResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
Status InvalidArgument(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status InvalidUsage(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status SystemError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status InternalError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
Status RemoteError(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// SystemError with ": <strerror(err)> (errno N)" appended.
Status ErrnoError(int err, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

std::string vformat(const char* fmt, va_list ap);
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// A value or a non-ok Status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return value_; }
  const T& value() const & { return value_; }
  T&& value() && { return std::move(value_); }
  T* operator->() { return &value_; }
  T& operator*() { return value_; }

 private:
  Status status_;
  T value_{};
};

}  // namespace snccl

// Propagates a non-ok Status to the caller.
#define SNCCL_TRY(expr)                          \
  do {                                           \
    ::snccl::Status snccl_try_status_ = (expr);  \
    if (!snccl_try_status_.ok()) return snccl_try_status_; \
  } while (0)

#define SNCCL_CONCAT_INNER_(a, b) a##b
#define SNCCL_CONCAT_(a, b) SNCCL_CONCAT_INNER_(a, b)
// `SNCCL_ASSIGN_OR_RETURN(auto x, makeX());` declares x from a Result or returns its Status.
#define SNCCL_ASSIGN_OR_RETURN(lhs, expr) \
  SNCCL_ASSIGN_OR_RETURN_IMPL_(SNCCL_CONCAT_(snccl_result_, __LINE__), lhs, expr)
#define SNCCL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
