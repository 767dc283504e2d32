// RemoteClient: the Client interface over a broker (`tensord serve`) reached by gRPC.
//
// The header is lean on purpose (no gRPC or protobuf headers): `connect()` in the tensord
// library includes it.
//
// Lifetime: connect() does the handshake (checks the protocol version), opens a session and
// attaches it to a long-lived call (the broker frees the session when that call ends: this
// process died or its connection dropped); a background thread renews the session's lease
// while the client lives; the destructor closes the session (the broker frees its tensors).
//
// Data path: small values travel inline (an execute() answer carries its small outputs);
// large ones in 2 MiB stream chunks, or, when the broker runs on the same host (same boot id,
// unix socket or loopback address), through shared memory: memfd regions sealed against
// shrinking, handed to the broker as descriptors (SCM_RIGHTS on its region socket, with a
// one-time ticket of the session), which it maps (TENSORD_TRANSPORT=grpc|shm overrides). Large
// floating-point uploads lend their region to the broker, which computes on it in place; the
// region is not written again until the broker reports it free (ReclaimRegions). Streamed
// chunks are sent straight from the caller's memory (no copy on this side). Reads land in the
// caller's memory with one copy on this side (read_into): parsed off the stream, or copied out
// of the region part by part while the broker writes the next part (values of 8 MiB or more).
//
// Failures: a broker that is down or goes away answers UNAVAILABLE, quickly — calls never wait
// for a connection (wait_for_ready is off), calls that do not wait on device work carry a
// deadline, and keepalive pings find a silent peer on the long ones (read(), wait()). Errors
// raised by the broker arrive with their code and message unchanged.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensord/client.h"

namespace tensord::rpc {

struct RemoteClientOptions {
  // Deadline of the handshake and session opening.
  std::chrono::milliseconds connect_timeout{5000};
  // Deadline of every call that does not wait on device work (all but read() and wait()).
  std::chrono::milliseconds call_timeout{60000};
  // Bytes the session may hold on the broker; 0 = the broker's limit.
  int64_t memory_limit = 0;
  // Bulk transfer chunk size; 0 = the default (2 MiB). Uploads up to one chunk go in one
  // unary call, larger ones are streamed.
  int64_t chunk_bytes = 0;
  // Outputs of execute()/run() up to this many bytes (all together) come back in the same
  // answer, so reading them costs no further round trip; 0 = off. execute() then returns when
  // those small outputs are computed.
  int64_t inline_max_bytes = 256 << 10;
  // Concurrent streams for one large (>= 64 MiB) gRPC upload or read (each needs a core on
  // both sides; a read is split only when the broker lends the value without a copy of its
  // own); 0 = half the cores, at most 4 (TENSORD_UPLOAD_STREAMS overrides); 1 = one stream.
  int64_t upload_streams = 0;
  // Bearer token for a broker started with --token-file; empty = TENSORD_TOKEN. Surrounding
  // whitespace is trimmed; any other byte outside printable ASCII is INVALID_ARGUMENT.
  std::string token;
  // TLS: on when any of these is set (else TENSORD_TLS_CA, TENSORD_TLS_CERT/TENSORD_TLS_KEY, or
  // TENSORD_TLS=1 for the system's CAs). The CA verifies the broker's certificate (whose name
  // must match the address's host); the certificate and key are this client's, for a broker
  // with --tls-ca (mutual TLS).
  bool tls = false;
  std::string tls_ca_file, tls_cert_file, tls_key_file;
  // "auto" (shared memory when the broker runs on this host, else gRPC streams), "grpc", or
  // "shm" (shared memory or fail); empty = TENSORD_TRANSPORT, else "auto".
  std::string transport;
  // Transfers at least this large go through shared memory when it is in use.
  int64_t shm_min_bytes = 64 << 10;
  // Pipelined runs: run() of a model this client loaded sends the request and returns at
  // once, as the embedded engine's run() does, with handles that stand for the broker's until
  // its answer arrives (any later call with one waits for that answer). A client can then
  // queue the next run while the broker computes the last, and the round trip is hidden.
  // Errors of the run itself (a wrong input, a failed kernel) then come from wait(), read()
  // and the calls that use its outputs, not from run(). Off: run() returns with the answer.
  bool pipeline_runs = false;
};

// A model loaded from an ONNX file by the broker (RemoteClient::load_onnx).
struct LoadedModel {
  ModelHandle handle = 0;
  std::string name;                   // the graph's name
  std::vector<ValueInfo> inputs;      // runtime inputs, in the order run() binds them
  std::vector<ValueInfo> outputs;     // dtype kUndefined / dims -1 where not declared
  int64_t opset = 0, ir_version = 0;  // what the file declared
  std::string producer;               // "pytorch 2.1.0"
};

// One run()/execute() request's phases in microseconds (RemoteClient::set_breakdown): this
// side's, and the broker's from its answer's trailer (0 where the broker sent none).
struct RequestTiming {
  double encode = 0, call = 0, decode = 0;  // here: build the request, the call, take the answer
  // The broker: auth and session lookup, graph decoding (execute), input checks and the
  // compiled-form lookup, waiting for a device runner, the run, reading the outputs into the
  // answer (with the handler's wake-up after a queued run), the whole handler.
  double session = 0, parse = 0, prepare = 0, handoff = 0, run = 0, outputs = 0, handler = 0;
  // What neither side's handler saw: the transport, gRPC on both sides, the interceptors.
  double transport() const { return call > handler ? call - handler : 0; }
  // Its two halves, on the same host (a shared steady clock; -1 when the broker is elsewhere
  // or sent no clock): from this side's send to the handler's start, and from the handler's
  // end to the answer here.
  double there = -1, back = -1;
};

// The medians of requests' phases in a request's order (name, microseconds), then the round
// trip's mean and 99th percentile: what tensord bench --breakdown and bench transfer print.
std::vector<std::pair<std::string, double>> median_phases(
    const std::vector<RequestTiming>& timings);

class RemoteClient final : public Client {
 public:
  // `address`: "HOST:PORT" or "unix:PATH". UNAVAILABLE if no broker answers there within
  // options.connect_timeout; FAILED_PRECONDITION if it speaks another protocol version.
  static Result<std::unique_ptr<RemoteClient>> connect(const std::string& address,
                                                       const RemoteClientOptions& options = {});
  ~RemoteClient() override;

  Result<std::vector<DeviceInfo>> devices() override;
  std::string default_device() override;
  Result<TensorHandle> upload(const TensorView& src, const std::string& device) override;
  Result<HostTensor> read(TensorHandle h) override;
  Result<TensorType> read_into(TensorHandle h, void* dst, size_t room) override;
  Result<HostTensor> allocate_host(DType dtype, Shape shape) override;
  Status wait(TensorHandle h) override;
  Result<TensorInfo> info(TensorHandle h) override;
  Result<std::vector<TensorHandle>> execute(const Graph& graph,
                                            const std::vector<TensorHandle>& inputs,
                                            const std::string& device) override;
  Result<TensorHandle> copy(TensorHandle h, const std::string& device) override;
  Status release(TensorHandle h) override;
  Result<ModelHandle> load(const Graph& graph, const std::string& device) override;
  Result<std::vector<TensorHandle>> run(ModelHandle model,
                                        const std::vector<TensorHandle>& inputs) override;
  Result<std::vector<TensorHandle>> run_on(ModelHandle model,
                                           const std::vector<TensorHandle>& inputs,
                                           const std::string& device) override;
  Status unload(ModelHandle model) override;
  // Named models of the broker (tensord serve --models DIR): OpenModel / ListModels.
  Result<ModelHandle> open_model(const std::string& name, ModelInfo* info = nullptr) override;
  Result<std::vector<ModelInfo>> list_models() override;
  ClientStats stats() override;
  // CUDA IPC to a broker on this host with a cuda device (CudaIpcMemory in the proto).
  Result<TensorHandle> upload_cuda(const TensorView& src, const std::string& device) override;
  Result<TensorType> read_into_cuda(TensorHandle h, void* dst, size_t room) override;

  // Loads an ONNX model from its file's bytes: they are streamed to the broker, which imports
  // them with its ONNX importer (src/onnx) and loads the graph like load(). The file must be
  // self-contained (external data files are INVALID_ARGUMENT). Import errors come back with
  // the importer's code and message (INVALID_ARGUMENT for a corrupt or truncated file,
  // UNIMPLEMENTED for unsupported ops or opsets); a file over the broker's --max-model-bytes is
  // RESOURCE_EXHAUSTED before a byte is sent; a broker too old to import ONNX files is
  // FAILED_PRECONDITION.
  Result<LoadedModel> load_onnx(std::string_view onnx_bytes, const std::string& device = "");

  const std::string& address() const;
  // The broker's session id, 32 hex characters (sent as the "tensord-session" metadata).
  const std::string& session() const;
  std::string server_version() const;
  // Calls made by this client so far, through gRPC or the run channel (a stream counts once;
  // heartbeats and opening the run channel are not counted). Tests use it to check that a
  // lazy chain costs one round trip.
  int64_t rpc_count() const;
  // run() and execute() go through a run channel (the broker is on this host and offers one;
  // opened by the first such call): no gRPC on their way (proto/tensord.proto, OpenRunChannel).
  bool uses_run_channel() const;
  // Request breakdown (tensord bench --breakdown): while on, each run()/execute() asks the
  // broker for its phases and keeps them with this side's; take_breakdown() hands them over.
  void set_breakdown(bool on);
  // RemoteClientOptions::pipeline_runs, changed (for the runs made after the call).
  void set_pipeline_runs(bool on);
  std::vector<RequestTiming> take_breakdown();
  // One bare unary round trip carrying `payload_bytes` each way (for benchmarks).
  Status echo(int64_t payload_bytes);
  // Whether bulk transfers go through shared memory now ("shm") or gRPC streams ("grpc").
  // In "auto", shared memory is tried on the first large transfer and dropped if the broker
  // cannot map the client's region.
  std::string transport() const;

  struct Impl;

 private:
  explicit RemoteClient(std::unique_ptr<Impl> impl);
  Result<std::vector<TensorHandle>> run_pipelined(ModelHandle model,
                                                  const std::vector<TensorHandle>& inputs,
                                                  size_t outputs);
  std::unique_ptr<Impl> impl_;
};

// The broker's status as one JSON document (devices, sessions, totals, per-method figures,
// recent errors, and the samples of the last `history_seconds`): what `tensord status` shows.
// Opens no session. Token and TLS as for connect() (options, else TENSORD_TOKEN / TENSORD_TLS_*).
Result<std::string> broker_status(const std::string& address,
                                  const RemoteClientOptions& options = {},
                                  int history_seconds = 0);

// Model control, with no session (`tensord models`): kList lists the broker's named models;
// kLoad loads or reloads DIR/NAME and kUnload takes NAME away (a broker started with
// `--models DIR --model-control`, an operator's token). Returns NAME's entries after the change
// (kList: every model). Token and TLS as for broker_status.
enum class ModelControl { kList, kLoad, kUnload };
Result<std::vector<ModelInfo>> control_model(const std::string& address, ModelControl op,
                                             const std::string& name = "",
                                             const RemoteClientOptions& options = {});

}  // namespace tensord::rpc
