// make_batch_models.py's models folder (tests/rpc/test_batching.cpp, test_model_control.cpp),
// written once per test process into a temp folder, removed at exit; `skip_reason` says why
// not (no /usr/bin/python3 with onnx and numpy).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tensord::testing {

class BatchModels {
 public:
  static const BatchModels& get() {
    static const BatchModels m;
    return m;
  }
  std::string dir, skip_reason;

 private:
  BatchModels() {
    if (access("/usr/bin/python3", X_OK) != 0) {
      skip_reason = "no /usr/bin/python3 to write the ONNX test files";
      return;
    }
    if (std::system("/usr/bin/python3 -c 'import onnx, numpy' 2>/dev/null") != 0) {
      skip_reason = "/usr/bin/python3 lacks onnx or numpy (Debian python3-onnx, python3-numpy)";
      return;
    }
    std::string t = (std::filesystem::temp_directory_path() / "tensord-batch.XXXXXX").string();
    if (!mkdtemp(t.data())) {
      skip_reason = "cannot make a temp folder";
      return;
    }
    const std::string cmd =
        "/usr/bin/python3 " TENSORD_RPC_TEST_DIR "/make_batch_models.py " + t + "/models";
    if (std::system(cmd.c_str()) != 0) {
      skip_reason = "make_batch_models.py failed: " + cmd;
      return;
    }
    dir = t + "/models";
  }
  ~BatchModels() {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(std::filesystem::path(dir).parent_path(), ec);
  }
};

}  // namespace tensord::testing
