// Peer runtimes for `tensord bench --vs`: small scripts under bench/peers/ run as
// subprocesses on the same ONNX model and input tensors. Protocol (each script):
//   --model FILE.onnx --input NAME=FILE.npy ... --examples N --batch-size B --warmup W
//   --threads T --outputs DIR   (torch.py also takes --network NAME for a zoo network)
// prints ONE JSON line on stdout: {"peer", "version", "available": true, "threads",
// "compile_s", "execution_s", "per_example_s", "examples", "batch_size",
// "outputs": {name: DIR/name.npy}} or {"peer", "available": false, "reason"}; a non-zero exit
// (message on stderr) is a real failure.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensord/status.h"

namespace tensord::cli {

// The peers --vs accepts, in the order they run.
const std::vector<std::string>& known_peers();

// The folder holding the peer scripts, found from the executable (/proc/self/exe), never from
// where it was built: TENSORD_BENCH_PEERS, else the installed <prefix>/<datadir>/tensord/peers
// (relative to <prefix>/<bindir>), else ../share/tensord/peers, ../bench/peers (a build folder
// in the checkout) or bench/peers beside the executable. "" when none holds a peer script.
std::string peers_dir();
// The folders peers_dir() looks in after TENSORD_BENCH_PEERS, in order.
std::vector<std::string> peers_dir_candidates();

struct PeerRequest {
  std::string model;                                        // .onnx file
  std::vector<std::pair<std::string, std::string>> inputs;  // name -> .npy file
  std::string network;                                      // zoo name, "" for a --model file
  int64_t examples = 0, batch_size = 1, warmup = 0;
  int threads = 0;  // 0: the peer's default
  std::string outputs_dir;
  double start_at = 0;  // > 0: the timed run starts at this Unix time (onnxruntime peer)
};

struct PeerResult {
  std::string peer;
  bool available = false;
  std::string reason;   // why not available, or the failure
  bool failed = false;  // the peer ran and failed (non-zero exit / bad JSON)
  std::string version;
  int threads = 0;
  double compile_s = 0, execution_s = 0, per_example_s = 0;
  double timed_start_unix = 0, timed_end_unix = 0;  // when reported (onnxruntime peer)
  std::map<std::string, std::string> outputs;  // output name -> .npy
};

struct ProcessResult {
  int exit_code = -1;  // -1: could not start / killed by a signal
  std::string out, err;
  std::string start_error;  // exec failed: why
};

// Runs argv (argv[0] looked up on PATH) with stdout and stderr captured; stdin is /dev/null.
ProcessResult run_process(const std::vector<std::string>& argv);

// Runs one peer script; never throws. A missing script or interpreter is "not available".
PeerResult run_peer(const std::string& peer, const PeerRequest& request);

}  // namespace tensord::cli
