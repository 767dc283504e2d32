#include "engine/work_queue.h"

namespace tensord::engine_queue {

Status Frame::cancelled() const { return task->tokens.check(); }

Status Frame::checkpoint() {
  if (Status s = task->tokens.check(); !s.ok()) return s;
  if (nested) {
    if (Clock::now() - slice_start >= queue->slice()) {
      preempted = true;
      return Status(StatusCode::kAborted,
                    "preempted: ran past its time slice inside another session's work; it runs "
                    "again in its own turn");
    }
    return OkStatus();
  }
  queue->maybe_yield(*this);
  return task->tokens.check();
}

}  // namespace tensord::engine_queue
