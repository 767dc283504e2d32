// Shared between the binding's files: errors as Python exceptions, GIL-safe keepalives.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "tensord/array.h"
#include "tensord/client.h"
#include "tensord/status.h"

namespace tensord::python {

namespace py = pybind11;

// A non-OK Status on its way to Python; translated by the registered exception translator
// into the class tensord/__init__.py registered for its code (ValueError for
// INVALID_ARGUMENT, MemoryError for RESOURCE_EXHAUSTED, tensord.Unavailable, ...).
struct StatusError : std::exception {
  explicit StatusError(Status s) : status(std::move(s)), text(status.to_string()) {}
  const char* what() const noexcept override { return text.c_str(); }
  Status status;
  std::string text;
};

[[noreturn]] inline void throw_status(const Status& s) { throw StatusError(s); }
inline void check(const Status& s) {
  if (!s.ok()) throw_status(s);
}
template <typename T>
T value_or_throw(Result<T> r) {
  if (!r.ok()) throw_status(r.status());
  return std::move(r).value();
}

// A client and the Array context bound to it (one per tensord.Client in Python).
struct PyClient {
  std::shared_ptr<Context> ctx;
  std::string address;  // "" = embedded
  Client& client() const { return ctx->client(); }
};

// Runs `release` on Python objects owned by C++ memory that may be dropped on a thread
// without the GIL (an engine queue thread dropping a DLPack import's keepalive): at once when
// this thread holds the GIL, else queued and run on the main thread at its next bytecode.
void call_with_gil(void (*fn)(void*), void* arg);

void register_dlpack(py::module_& m);

}  // namespace tensord::python
