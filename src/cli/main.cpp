// The `tensord` command.
//
// Exit status (scripts may rely on it): 0 success; 1 the operation failed (a device or
// runtime error, message on stderr); 2 bad usage or bad input (unknown flag, unreadable file).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/cli_common.h"
#include "cli/cmd_serve.h"
#include "cli/serve_config.h"
#include "cli/commands.h"
#include "cli/suggest.h"
#include "cli/units.h"
#include "core/log.h"
#include "engine/engine.h"
#include "tensord/client.h"
#include "tensord/version.h"

namespace {

using tensord::cli::kExitFailure;
using tensord::cli::kExitOk;
using tensord::cli::kExitUsage;
using tensord::cli::accept_size;

int cmd_devices(bool json, bool verbose, std::string address) {
  if (address.empty())
    if (const char* env = std::getenv("TENSORD_ADDRESS")) address = env;
  std::shared_ptr<tensord::Engine> local;
  std::vector<tensord::DeviceInfo> devices;
  if (address.empty()) {  // the embedded engine: it also knows what the filter removed
    auto engine = tensord::Engine::shared();
    if (!engine.ok()) {  // a bad setting (TENSORD_CPU_DEVICES=x) is a usage error
      std::cerr << "tensord: " << engine.status().to_string() << "\n";
      return engine.status().code() == tensord::StatusCode::kInvalidArgument ? kExitUsage
                                                                            : kExitFailure;
    }
    local = *engine;
    devices = local->devices();
  } else {  // a broker's devices, through the same Client interface every tool uses
    auto client = tensord::connect(address);
    if (!client.ok()) {
      std::cerr << "tensord: " << client.status().to_string() << "\n";
      return client.status().code() == tensord::StatusCode::kInvalidArgument ? kExitUsage
                                                                              : kExitFailure;
    }
    auto listed = (*client)->devices();
    if (!listed.ok()) {
      std::cerr << "tensord: " << listed.status().to_string() << "\n";
      return kExitFailure;
    }
    devices = std::move(listed).value();
  }
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& d : devices) {
      out.push_back({{"name", d.name},
                     {"kind", d.kind},
                     {"index", d.index},
                     {"vendor", d.vendor},
                     {"model", d.model},
                     {"memory_bytes", d.memory_bytes},
                     {"memory_in_use_bytes", d.memory_in_use},
                     {"backend", d.backend},
                     {"backend_version", d.backend_version},
                     {"threads", d.threads},
                     {"driver_version", d.driver_version},
                     {"compute_units", d.compute_units},
                     {"fp16", d.fp16}});
    }
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    // One line per device: name, kind, model (vendor), memory, threads, backend.
    size_t name_w = 4, kind_w = 4;
    for (const auto& d : devices) {
      name_w = std::max(name_w, d.name.size());
      kind_w = std::max(kind_w, d.kind.size());
    }
    for (const auto& d : devices) {
      std::string name = d.name, kind = d.kind;
      name.resize(name_w, ' ');
      kind.resize(kind_w, ' ');
      std::cout << name << "  " << kind << "  " << d.model << " (" << d.vendor << ")  memory "
                << tensord::format_bytes(d.memory_bytes);
      if (d.threads) std::cout << "  threads " << d.threads;
      if (d.compute_units) std::cout << "  compute units " << d.compute_units;
      if (!d.driver_version.empty()) std::cout << "  driver " << d.driver_version;
      if (d.kind != "cpu") std::cout << "  fp16 " << (d.fp16 ? "yes" : "no");
      std::cout << "  backend " << d.backend_version << "\n";
    }
  }
  // Backends of this build that found no devices say why (one line each); not mixed into
  // --json output unless --verbose.
  if (local && (!json || verbose))
    for (const auto& why : local->unavailable_backends()) std::cerr << "tensord: no " << why << "\n";
  if (devices.empty() && local) {
    const auto& gone = local->filtered_out();
    std::string names;
    for (const auto& n : gone) names += (names.empty() ? "" : ", ") + n;
    std::cerr << "tensord: no devices available: TENSORD_DEVICES='" << local->device_filter()
              << "' filters out every device" << (names.empty() ? "" : " (" + names + ")") << "\n";
  } else if (devices.empty()) {
    std::cerr << "tensord: the broker at " << address << " has no devices\n";
  }
  return kExitOk;
}

// --address, --tls-ca and --token-file: the same three flags on every command that talks to
// a broker; a command's own --address or --tls-ca (bench, status) is kept. Applied through
// the environment every client reads (TENSORD_ADDRESS, TENSORD_TLS_CA, TENSORD_TOKEN).
struct BrokerFlags {
  std::string address, tls_ca, token_file;
};

void add_broker_flags(CLI::App* cmd, BrokerFlags& f) {
  if (cmd->get_option_no_throw("--address") == nullptr)
    cmd->add_option("--address", f.address,
                    "The broker (HOST:PORT or unix:PATH; default TENSORD_ADDRESS, else the "
                    "embedded engine)");
  if (cmd->get_option_no_throw("--tls-ca") == nullptr)
    cmd->add_option("--tls-ca", f.tls_ca, "Speak TLS to the broker, verified with this PEM CA");
  cmd->add_option("--token-file", f.token_file,
                  "The broker's token: the first line of this file (default TENSORD_TOKEN)");
}

// Exit status to stop with, or -1.
int apply_broker_flags(const BrokerFlags& f) {
  if (!f.address.empty()) setenv("TENSORD_ADDRESS", f.address.c_str(), 1);
  if (!f.tls_ca.empty()) setenv("TENSORD_TLS_CA", f.tls_ca.c_str(), 1);
  if (f.token_file.empty()) return -1;
  std::ifstream in(f.token_file);
  if (!in) {
    std::cerr << "tensord: --token-file: cannot read '" << f.token_file
              << "': " << std::strerror(errno) << "\n";
    return kExitUsage;
  }
  std::string line, token;
  while (token.empty() && std::getline(in, line)) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    token = line.substr(b, line.find_last_not_of(" \t\r") - b + 1);
  }
  if (token.empty()) {
    std::cerr << "tensord: --token-file: '" << f.token_file << "' holds no token\n";
    return kExitUsage;
  }
  setenv("TENSORD_TOKEN", token.c_str(), 1);
  return -1;
}

int run_main(int argc, char** argv) {
  CLI::App app{"tensord: a tensor compute broker (devices, ONNX models, NumPy-like API)"};
  app.set_version_flag("--version", std::string("tensord ") + tensord::kVersion + " (protocol " +
                                        std::to_string(tensord::kProtocolVersion) + ")");
  app.require_subcommand(1);

  auto* devices = app.add_subcommand("devices", "List the devices tensord may use");
  bool json = false;
  devices->add_flag("--json", json, "Print one JSON array");
  std::string devices_address;
  devices->add_option("--address", devices_address,
                      "List a broker's devices (HOST:PORT or unix:PATH; default TENSORD_ADDRESS)");
  bool devices_verbose = false;
  devices->add_flag("--verbose,-v", devices_verbose,
                    "Also say why a backend of this build found no devices (always so without "
                    "--json)");
  BrokerFlags broker_flags;
  add_broker_flags(devices, broker_flags);

  tensord::cli::ServeOptions serve_opts;
  auto* serve = app.add_subcommand("serve", "Serve this machine's devices over gRPC (the broker)");
  serve->add_option("--listen,-l", serve_opts.listen,
                    "HOST:PORT (port 0: any free port) or unix:PATH (required, here or in "
                    "--config)");
  accept_size(serve->add_option("--session-memory-limit", serve_opts.session_memory_limit,
                    "Bytes one session may hold: 4GiB, 512MiB or plain bytes (0: unlimited)"));
  serve->add_option("--lease-seconds", serve_opts.lease_seconds,
                    "Free a session's tensors when no call names it for this long")
      ->capture_default_str();
  serve->add_option("--drain-seconds", serve_opts.drain_seconds,
                    "On SIGTERM/SIGINT, how long in-flight calls may finish")
      ->capture_default_str();
  serve->add_option("--token-file", serve_opts.token_file,
                    "Tenants and their tokens, one a line (NAME:TOKEN or TOKEN; mode 600): every "
                    "call must carry one (clients: TENSORD_TOKEN)");
  serve->add_flag("--insecure", serve_opts.insecure,
                  "Allow a non-loopback --listen address without --token-file");
  serve->add_option("--tls-cert", serve_opts.tls_cert, "Serve TLS with this PEM certificate");
  serve->add_option("--tls-key", serve_opts.tls_key, "The PEM private key of --tls-cert");
  serve->add_option("--tls-ca", serve_opts.tls_ca,
                    "Require client certificates signed by this PEM CA (mutual TLS)");
  accept_size(serve->add_option("--tenant-memory-limit", serve_opts.tenant_memory_limit,
                    "Bytes all sessions of one tenant (token) may hold together (0: unlimited)"));
  accept_size(serve->add_option("--max-message-bytes", serve_opts.max_message_bytes,
                    "Largest message one call may carry (default 64 MiB)"));
  serve->add_option("--max-sessions", serve_opts.max_sessions,
                    "Sessions open at once, all tenants (default 4096)");
  serve->add_option("--max-sessions-per-tenant", serve_opts.max_sessions_per_tenant,
                    "Sessions one tenant may hold open (default 256)");
  accept_size(serve->add_option("--shm-arena-bytes", serve_opts.shm_arena_bytes,
                    "Largest arena per same-host session: shared memory its values of 1 MiB and "
                    "more live in, mapped read-only by the client so reads are one copy; kept "
                    "until the session ends (default 1 GiB, capped by --session-memory-limit; "
                    "0: none)"));
  serve->add_option("--max-calls-per-session", serve_opts.max_calls_per_session,
                    "Calls and streams in flight at once per session (default 64)");
  accept_size(serve->add_option("--max-region-bytes", serve_opts.max_region_bytes,
                    "Bytes of shared-memory regions mapped at once, all sessions; each region "
                    "also counts against the memory limits (0: the physical memory, the default)"));
  serve->add_option("--max-regions", serve_opts.max_regions,
                    "Shared-memory regions mapped at once, all sessions (0: a quarter of "
                    "vm.max_map_count, the default)");
  accept_size(serve->add_option("--max-model-bytes", serve_opts.max_model_bytes,
                    "Largest serialized graph LoadModel takes (default 2 GiB - 1)"));
  bool serve_strict_device = false;
  serve->add_flag("--strict-device", serve_strict_device,
                  "Refuse graphs with nodes the requested device does not support, naming the "
                  "ops, instead of running them on cpu:0 (TENSORD_STRICT_DEVICE=1)");
  serve->add_option("--max-compiles-per-tenant", serve_opts.max_compiles_per_tenant,
                    "Compiles one tenant may run at once; up to 16 times as many wait, more are "
                    "refused (default 2; 0: no limit)")
      ->check(CLI::Range(int64_t{0}, int64_t{65536}));
  serve->add_option("--max-threads", serve_opts.max_threads,
                    "gRPC threads, one per in-flight call; more calls wait (default 256)");
  accept_size(serve->add_option("--grpc-memory-bytes", serve_opts.grpc_memory_bytes,
                    "Memory gRPC may take for its buffers (default 2 GiB)"));
  serve->add_option("--http", serve_opts.http,
                    "Also serve HTTP here: the status page (/), /api/status, /metrics "
                    "(Prometheus), /healthz, /readyz. PORT (on 127.0.0.1) or HOST:PORT; same "
                    "tokens and TLS as gRPC");
  serve->add_option("--http-max-connections", serve_opts.http_max_connections,
                    "HTTP connections held at once, all clients; at the cap a new one takes the "
                    "place of the oldest unfinished request of the address holding the most "
                    "(default 256)");
  serve->add_option("--http-max-connections-per-ip", serve_opts.http_max_connections_per_ip,
                    "HTTP connections held at once from one client address (default 32)");
  serve->add_option("--http-header-timeout-ms", serve_opts.http_header_timeout_ms,
                    "An HTTP client must send its request's headers within this long of "
                    "connecting (default 5000)");
  auto status_command = tensord::cli::add_status_command(app);
  add_broker_flags(app.get_subcommand("status"), broker_flags);
  auto models_command = tensord::cli::add_models_command(app);
  add_broker_flags(app.get_subcommand("models"), broker_flags);
#ifdef TENSORD_CLI_HAVE_OPENCL
  auto tune_command = tensord::cli::add_tune_command(app);
#endif
  tensord::cli::add_serve_config_options(*serve, serve_opts);  // --log-*, --config
  serve->add_option("--models", serve_opts.models_dir,
                    "Named models: load every DIR/NAME/model.onnx once at start, shared by all "
                    "sessions (clients: open_model(NAME))");
  serve->add_flag("--model-control", serve_opts.model_control,
                  "With --models: let an operator load, reload and unload DIR/NAME while "
                  "serving (`tensord models load|unload NAME`; any caller without tokens)");
  serve->add_flag("--cluster", serve_opts.cluster,
                  "Run as one rank of a cluster started by mpirun/srun: rank 0 serves every "
                  "rank's devices as n<rank>/<device>, the other ranks work for it");
  serve->add_option("--cluster-timeout-ms", serve_opts.cluster_timeout_ms,
                    "--cluster: a rank silent this long has its devices UNAVAILABLE (default 3000)");

#ifdef TENSORD_CLI_HAVE_ONNX
  tensord::cli::RunOptions run_opts;
  auto* run = app.add_subcommand("run", "Run an ONNX model on tensors from .npy/.pb files");
  run->add_option("model", run_opts.model, "The .onnx model")->required();
  run->add_option("files", run_opts.files,
                  "Input files (.npy or TensorProto .pb) for the inputs not named by --input, in "
                  "graph-input order");
  run->add_option("--input,-i", run_opts.named_inputs, "An input by name: name=FILE (repeatable)")
      ->allow_extra_args(false);
  run->add_option("--output,-o", run_opts.output_dir,
                  "Write each output to DIR/<output name>.npy (default: print a summary)");
  run->add_option("--device,-d", run_opts.device, "Device to run on (default: TENSORD_DEVICE)");
  run->add_flag("--random-inputs", run_opts.random_inputs,
                "Make up the inputs no file gives: the model's declared shapes and types, random "
                "values (floats normal, integers 0..9)");
  run->add_option("--dim", run_opts.dims,
                  "With --random-inputs: the size of a free dimension, NAME=N as the model names "
                  "it (float32[batch, 16]: --dim batch=8); default 1 (repeatable)")
      ->allow_extra_args(false);
  run->add_flag("--profile", run_opts.profile,
                "Time every step; the table (with the share on reference kernels and in regions "
                "with oneDNN ref primitives) goes to stderr when the model is unloaded");
  bool strict_device = false;
  const char* strict_help =
      "A node the device does not support is an error naming the ops, instead of running on "
      "cpu:0 with copies at the cuts (TENSORD_STRICT_DEVICE=1)";
  run->add_flag("--strict-device", strict_device, strict_help);

  tensord::cli::OnnxTestOptions test_opts;
  auto* onnx_test = app.add_subcommand(
      "onnx-test", "Run ONNX backend node tests (model.onnx + test_data_set_N/*.pb folders)");
  onnx_test->add_option("dirs", test_opts.dirs, "A test folder, or a folder of test folders")
      ->required();
  onnx_test->add_option("--device,-d", test_opts.device, "Device to run on");
  onnx_test->add_flag("--strict-device", strict_device, strict_help);
  onnx_test->add_option("--filter", test_opts.filter, "Only tests whose name matches this glob");
  onnx_test->add_flag("--json", test_opts.json, "Print one JSON object with every test's result");
  onnx_test->add_flag("--verbose,-v", test_opts.verbose, "Also print passes and skips");
  onnx_test
      ->add_option("--rtol", test_opts.rtol,
                   "Relative tolerance: |actual - expected| <= atol + rtol * |expected|")
      ->capture_default_str();
  onnx_test->add_option("--atol", test_opts.atol, "Absolute tolerance (see --rtol)")
      ->capture_default_str();

  tensord::cli::BenchOptions bench_opts;
  auto* bench = app.add_subcommand(
      "bench", "Benchmark a zoo network or an ONNX model (plaidbench's compile / execution / "
               "per-example times and correctness), optionally beside onnxruntime and torch");
  tensord::cli::add_bench_options(*bench, bench_opts);
  bench->add_flag("--strict-device", strict_device, strict_help);
  auto bench_transfer = tensord::cli::add_bench_transfer_command(*bench);
  auto bench_load = tensord::cli::add_bench_load_command(*bench);
  auto bench_share = tensord::cli::add_bench_share_command(*bench);
  auto bench_serve = tensord::cli::add_bench_serve_command(*bench);
  for (CLI::App* cmd : {run, onnx_test, bench, bench->get_subcommand("transfer"),
                        bench->get_subcommand("load")})
    add_broker_flags(cmd, broker_flags);
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11's message, or the unknown command / flag with the nearest known one.
    std::cerr << tensord::cli::parse_failure_message(app, e, argc, argv) << std::endl;
    return kExitUsage;
  }
  // The log level every command starts from (serve's --log-level and --config come after).
  if (const char* env = std::getenv("TENSORD_LOG_LEVEL"); env && *env && !serve->parsed()) {
    auto level = tensord::log::parse_level(env, "TENSORD_LOG_LEVEL");
    if (!level.ok()) {
      std::cerr << "tensord: " << level.status().message() << "\n";
      return kExitUsage;
    }
  }
  if (serve->parsed())
    if (int rc = tensord::cli::finish_serve_options(*serve, serve_opts); rc >= 0) return rc;
  if (int rc = apply_broker_flags(broker_flags); rc >= 0) return rc;
#ifdef TENSORD_CLI_HAVE_ONNX
  // Read by the engine's options (a broker's own setting applies to its clients).
  if (strict_device || serve_strict_device) setenv("TENSORD_STRICT_DEVICE", "1", 1);
#else
  if (serve_strict_device) setenv("TENSORD_STRICT_DEVICE", "1", 1);
#endif
  if (devices->parsed()) return cmd_devices(json, devices_verbose, devices_address);
  if (serve->parsed()) return tensord::cli::cmd_serve(serve_opts);
  if (status_command.parsed()) return status_command.run();
  if (models_command.parsed()) return models_command.run();
#ifdef TENSORD_CLI_HAVE_OPENCL
  if (tune_command.parsed()) return tune_command.run();
#endif
#ifdef TENSORD_CLI_HAVE_ONNX
  if (run->parsed()) return tensord::cli::cmd_run(run_opts);
  if (onnx_test->parsed()) return tensord::cli::cmd_onnx_test(test_opts);
  if (bench->parsed())
    return bench->get_subcommands().empty()                     ? tensord::cli::cmd_bench(bench_opts)
           : bench->get_subcommands()[0]->get_name() == "load"  ? bench_load()
           : bench->get_subcommands()[0]->get_name() == "share" ? bench_share()
           : bench->get_subcommands()[0]->get_name() == "serve" ? bench_serve()
                                                                : bench_transfer();
#endif
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  // No exception escapes: anything thrown below (allocation failure, a library's surprise) is
  // reported as a failure with its message.
  try {
    return run_main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "tensord: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "tensord: internal error: unknown exception\n";
  }
  return kExitFailure;
}
