// Status constructors with fmt formatting, for use inside tensord (not part of the public API).
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tensord/status.h"

namespace tensord::errors {

#define TD_DEFINE_ERROR_(fn, code)                                            \
  template <typename... Args>                                                 \
  Status fn(fmt::format_string<Args...> f, Args&&... args) {                  \
    return Status(StatusCode::code, fmt::format(f, std::forward<Args>(args)...)); \
  }

TD_DEFINE_ERROR_(InvalidArgument, kInvalidArgument)
TD_DEFINE_ERROR_(NotFound, kNotFound)
TD_DEFINE_ERROR_(ResourceExhausted, kResourceExhausted)
TD_DEFINE_ERROR_(Unimplemented, kUnimplemented)
TD_DEFINE_ERROR_(Unavailable, kUnavailable)
TD_DEFINE_ERROR_(Internal, kInternal)
TD_DEFINE_ERROR_(FailedPrecondition, kFailedPrecondition)
TD_DEFINE_ERROR_(OutOfRange, kOutOfRange)
TD_DEFINE_ERROR_(PermissionDenied, kPermissionDenied)
TD_DEFINE_ERROR_(DataLoss, kDataLoss)

#undef TD_DEFINE_ERROR_

}  // namespace tensord::errors
