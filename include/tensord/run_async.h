// run_async: a model's run as a std::future, for C++ callers that want several runs in
// flight (the Python API's Model.run_async is the same thing over concurrent.futures).
#pragma once

#include <future>
#include <utility>
#include <vector>

#include "tensord/client.h"

namespace tensord {

// Runs `model` on `inputs` on a thread of its own and waits for the outputs: the future's
// value is Client::run's (the output handles, each computed, or the first error). `client`
// must outlive the future's result (Client methods may be called from several threads).
inline std::future<Result<std::vector<TensorHandle>>> run_async(Client& client, ModelHandle model,
                                                                std::vector<TensorHandle> inputs) {
  return std::async(
      std::launch::async,
      [&client, model, inputs = std::move(inputs)]() -> Result<std::vector<TensorHandle>> {
        auto out = client.run(model, inputs);
        if (!out.ok()) return out;
        for (TensorHandle h : *out)
          if (Status s = client.wait(h); !s.ok()) return s;
        return out;
      });
}

}  // namespace tensord
