// A folder of ONNX test files written by one of tests/rpc's make_*.py scripts
// (make_batch_models.py, make_named_models.py, make_onnx_models.py): made once per test process
// for each script and its arguments, in a temp folder removed at exit. `dir` is empty when it
// could not be made, and `skip_reason` says why (no /usr/bin/python3 with onnx and numpy, or the
// script failed).
//
//   REQUIRE_SCRIPT_MODELS(models, "make_named_models.py", "--small");
//   models.path("mlp/model.onnx")
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace tensord::testing {

class ScriptModels {
 public:
  static const ScriptModels& get(const std::string& script, const std::string& args = "") {
    static std::mutex mu;
    static std::map<std::string, std::unique_ptr<ScriptModels>> made;  // freed (removed) at exit
    std::lock_guard<std::mutex> lock(mu);
    auto& m = made[script + " " + args];
    if (!m) m.reset(new ScriptModels(script, args));
    return *m;
  }
  std::string dir, skip_reason;
  std::string path(const std::string& rel) const { return dir + "/" + rel; }

  ~ScriptModels() {
    std::error_code ec;
    if (!root_.empty()) std::filesystem::remove_all(root_, ec);
  }

 private:
  ScriptModels(const std::string& script, const std::string& args) {
    if (access("/usr/bin/python3", X_OK) != 0) {
      skip_reason = "no /usr/bin/python3 to write the ONNX test files";
      return;
    }
    if (std::system("/usr/bin/python3 -c 'import onnx, numpy' 2>/dev/null") != 0) {
      skip_reason = "/usr/bin/python3 lacks onnx or numpy (Debian python3-onnx, python3-numpy)";
      return;
    }
    std::string t = (std::filesystem::temp_directory_path() / "tensord-models.XXXXXX").string();
    if (!mkdtemp(t.data())) {
      skip_reason = "cannot make a temp folder";
      return;
    }
    root_ = t;
    const std::string cmd =
        "/usr/bin/python3 " TENSORD_RPC_TEST_DIR "/" + script + " " + t + "/models " + args;
    if (std::system(cmd.c_str()) != 0) {
      skip_reason = script + " failed: " + cmd;
      return;
    }
    dir = t + "/models";
  }
  std::string root_;
};

#define REQUIRE_SCRIPT_MODELS(var, ...)                   \
  const ::tensord::testing::ScriptModels& var =           \
      ::tensord::testing::ScriptModels::get(__VA_ARGS__); \
  if (var.dir.empty()) GTEST_SKIP() << var.skip_reason

}  // namespace tensord::testing
