// Client: the one interface everything above the engine is written against (the Array API,
// the CLI, the benchmark, the Python package). LocalClient runs an Engine in this process
// (the default); RemoteClient talks to a broker over gRPC. Only the address differs.
//
// Thread-safety: every Client method may be called from any thread.
// Asynchrony: execute() and copy() return handles at once; the work runs on the device's
// queue. read() and wait() block until the value is ready. An error in a graph lands on the
// handles that depend on the failing node; it is returned by wait()/read() of those handles.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tensord/device.h"
#include "tensord/graph.h"
#include "tensord/status.h"
#include "tensord/tensor.h"

namespace tensord {

// A tensor held by the engine, in this client's session. 0 is never a valid handle.
using TensorHandle = uint64_t;
// A graph loaded once into this client's session (load()), run many times. 0 is never valid.
using ModelHandle = uint64_t;

// A named model (`tensord serve --models DIR`, or an embedded engine's models folder): loaded
// once, shared by every session that opens it (Client::open_model, list_models).
struct ModelInfo {
  std::string name;    // the folder's name: DIR/NAME/model.onnx
  bool ready = false;  // loaded; false: it failed to load, `reason` says why
  std::string reason;
  std::string device;                // where it runs ("cpu:0")
  std::vector<ValueInfo> inputs;     // runtime inputs, in the order run() binds them
  std::vector<ValueInfo> outputs;    // dtype kUndefined / dims -1 where not declared
  int64_t weight_bytes = 0;          // its initializers, held once for all sessions
  int64_t opset = 0, ir_version = 0;  // what the file declared
  std::string producer;
};

struct TensorInfo {
  TensorType type;  // dims may be -1 until the value is computed (data-dependent shapes)
  std::string device;
};

// How allreduce() combines the tensors: elementwise sum, mean, maximum or minimum (ONNX's
// Sum, Mean, Max, Min: floating-point dtypes for Sum and Mean).
enum class ReduceOp { kSum, kMean, kMax, kMin };

struct ClientStats {
  int64_t executes = 0;  // execute() calls (graph flushes)
  int64_t uploads = 0;
  int64_t downloads = 0;
  int64_t copies = 0;
  int64_t runs = 0;  // run() calls on loaded models
  // Reads copied straight out of the session's arena: a same-host broker's values in shared
  // memory this process maps read-only (one copy, as on the embedded engine).
  int64_t arena_reads = 0;
};

// A tensor's bytes in this process's memory, shared with the engine (not copied): valid
// while `keepalive` is held. Tensors are immutable: the bytes must not be written.
struct HostMapping {
  TensorView view;
  std::shared_ptr<const void> keepalive;
};

// A tensor's bytes in place on its GPU (Client::map_cuda): `view.data` is a CUDA device
// pointer of this process on CUDA device `device_index` (the driver's ordinal), valid while
// `keepalive` is held. Tensors are immutable: the bytes must not be written.
struct CudaMapping {
  TensorView view;
  int device_index = 0;
  std::shared_ptr<const void> keepalive;
};

class Client {
 public:
  virtual ~Client() = default;

  virtual Result<std::vector<DeviceInfo>> devices() = 0;
  // Default device for new tensors: TENSORD_DEVICE, else the first device.
  virtual std::string default_device() = 0;

  // Copies host data into a new tensor on `device` ("" = default device).
  virtual Result<TensorHandle> upload(const TensorView& src, const std::string& device) = 0;
  // Blocks until the tensor is ready, then copies it to host memory.
  virtual Result<HostTensor> read(TensorHandle h) = 0;
  // Blocks until the tensor is ready, then copies its bytes into the caller's memory `dst`
  // when they fit in `room` bytes; when they do not, nothing is written. Returns the value's
  // type either way: its byte size tells whether it was written (and how much room to give
  // next time). The bytes come with one copy where they are in this process (the embedded
  // engine) and straight off the wire or out of a shared-memory region otherwise, into memory
  // the caller already has (no allocation, no page faults per read: NumPy, DLPack, Node).
  // A failed computation returns its error; a released handle NOT_FOUND; dst null with room
  // enough for a non-empty value INVALID_ARGUMENT.
  virtual Result<TensorType> read_into(TensorHandle h, void* dst, size_t room);
  // Host memory to read values into with the fewest copies this client can do, as CUDA's
  // pinned host memory is for its copies: against a broker on this host, shared memory the
  // broker writes into directly (read_into() of it is one copy instead of two: memory that
  // is not shared needs the broker's copy into a region and one more out of it); elsewhere
  // an ordinary 64-byte aligned allocation. Not initialised. The tensor owns the memory and
  // can be read into again and again; it stays valid after the client is gone.
  virtual Result<HostTensor> allocate_host(DType dtype, Shape shape) {
    return HostTensor::uninitialized(dtype, std::move(shape));
  }
  // Blocks until the tensor is ready; returns its error if its computation failed.
  virtual Status wait(TensorHandle h) = 0;
  // Type and device; does not block (unknown dims stay -1 until ready).
  virtual Result<TensorInfo> info(TensorHandle h) = 0;
  // Runs `graph` on `device` ("" = the first input's device, else the default device) with
  // `inputs` bound to graph.inputs in order. Returns one handle per graph output at once.
  virtual Result<std::vector<TensorHandle>> execute(const Graph& graph,
                                                    const std::vector<TensorHandle>& inputs,
                                                    const std::string& device) = 0;
  // Explicit copy to another device (same device: a new handle to the same bytes).
  virtual Result<TensorHandle> copy(TensorHandle h, const std::string& device) = 0;
  // Drops the handle; the bytes are freed when nothing else uses them.
  virtual Status release(TensorHandle h) = 0;

  // Loads a graph (an imported ONNX model, a zoo network) into this session once, for
  // `device` ("" = the default device): its initializers are kept by the engine (or the
  // broker), and each run() neither sends nor re-hashes the graph. Compiled on first run per
  // input types, then cached. The model is freed by unload() or when the session ends.
  virtual Result<ModelHandle> load(const Graph& graph, const std::string& device) = 0;
  // Runs a loaded model like execute(): inputs bound to graph.inputs in order, one handle per
  // graph output returned at once (inputs on other devices are moved to the model's device).
  virtual Result<std::vector<TensorHandle>> run(ModelHandle model,
                                                const std::vector<TensorHandle>& inputs) = 0;
  virtual Status unload(ModelHandle model) = 0;
  // Runs a loaded model on `device` instead of the device it was loaded for (inputs elsewhere
  // are moved there), compiled for that device once per input types; the inputs' and outputs'
  // first dimension may differ from the declared one (a part of a batch). Returns at once,
  // like run(). The building block of run_data_parallel().
  virtual Result<std::vector<TensorHandle>> run_on(ModelHandle model,
                                                   const std::vector<TensorHandle>& inputs,
                                                   const std::string& device) {
    return Status(StatusCode::kUnimplemented, "run_on: this client cannot run a model elsewhere");
  }

  // ---- Across devices (implemented once, for every client, on the calls above) ----------
  // Data parallel: splits every input along axis 0 into near-equal parts (the first
  // batch % N parts one example larger), one part per device in `devices` (moved there), runs
  // the model on every part at once (run_on: compiled per device) and gathers each output
  // along axis 0 on devices[0]. Returns one handle per model output, on devices[0]; the
  // outputs must carry the batch on axis 0. INVALID_ARGUMENT when `devices` is empty, an
  // input is a scalar, the inputs disagree on the batch, or the batch is smaller than the
  // number of devices. (A device may appear twice: it then runs two parts.)
  Result<std::vector<TensorHandle>> run_data_parallel(ModelHandle model,
                                                      const std::vector<TensorHandle>& inputs,
                                                      const std::vector<std::string>& devices);
  // Collectives, one tensor per device in, one per device out (result i on the device of
  // tensors[i]). The data moves with copy(): through the engine's copies embedded, rank to
  // rank over MPI on a cluster (n<r>/<device>). The tensors must have the same dtype and
  // shape (allgather: the same shape but for axis 0). Reduced and gathered on the first
  // tensor's device, then copied to the others.
  //   allreduce: every result is the elementwise `op` of all the tensors.
  //   allgather: every result is the tensors concatenated along axis 0, in order.
  Result<std::vector<TensorHandle>> allreduce(const std::vector<TensorHandle>& tensors,
                                              ReduceOp op = ReduceOp::kSum);
  Result<std::vector<TensorHandle>> allgather(const std::vector<TensorHandle>& tensors);
  // broadcast: `tensor`'s value on each of `devices` (one handle each, in order).
  Result<std::vector<TensorHandle>> broadcast(TensorHandle tensor,
                                              const std::vector<std::string>& devices);

  // Named models: loaded once by the broker (`tensord serve --models DIR`) or, embedded, from
  // LocalClientOptions::models_dir / TENSORD_MODELS, and shared by every session. open_model
  // returns a handle in this session, run() and unload() like a loaded one: nothing is sent
  // and nothing is charged to the session (the weights are held once, by the broker); the
  // outputs of run() belong to this session. unload() closes this session's handle only.
  // Unknown names are NOT_FOUND (the message lists the models there are); a model that failed
  // to load is FAILED_PRECONDITION with the reason. `info` (optional) receives the model's
  // name, device, inputs and outputs.
  virtual Result<ModelHandle> open_model(const std::string& name, ModelInfo* info = nullptr) {
    return Status(StatusCode::kUnimplemented, "open_model: this client has no named models");
  }
  // Every named model, ready or not (sorted by name).
  virtual Result<std::vector<ModelInfo>> list_models() {
    return Status(StatusCode::kUnimplemented, "list_models: this client has no named models");
  }

  virtual ClientStats stats() = 0;

  // Zero-copy exchange with host memory (the Python package's DLPack).
  // upload_external: a tensor whose bytes ARE `src.data` where the device's memory is host
  // memory and the data is 64-byte aligned (the embedded engine's cpu devices); `keepalive` is
  // dropped (from any thread) once the engine no longer uses the bytes, which the caller must
  // not change until then. Elsewhere (a remote broker, other devices): a copy, as upload().
  virtual Result<TensorHandle> upload_external(const TensorView& src, const std::string& device,
                                               std::shared_ptr<void> keepalive) {
    return upload(src, device);
  }
  // CUDA device memory, with no trip through host memory (the GPU counterpart of upload() and
  // read_into()): `src.data` / `dst` is a CUDA device pointer of this process (cudaMalloc or
  // cuMemAlloc memory, PyTorch's tensors; not cudaMallocAsync pools). The embedded engine
  // copies device to device on the GPU holding it; a broker on this host opens the buffer by
  // its CUDA IPC memory handle on the same GPU and copies there. Both have finished when they
  // return (the caller may reuse or read its memory); the caller's own writes to `src` must be
  // finished first (its stream synchronised).
  // upload_cuda: a new tensor on `device` ("" = the cuda device holding `src.data`; another
  // device gets a copy). read_into_cuda: as read_into() — written when the value fits in
  // `room` bytes, its type returned either way. FAILED_PRECONDITION naming why where it cannot
  // be done: no CUDA here or on the broker, a broker on another host, a pointer that is not
  // device memory, a GPU the broker does not have.
  virtual Result<TensorHandle> upload_cuda(const TensorView& src, const std::string& device) {
    (void)src, (void)device;
    return Status(StatusCode::kUnimplemented, "upload_cuda: this client cannot take CUDA memory");
  }
  virtual Result<TensorType> read_into_cuda(TensorHandle h, void* dst, size_t room) {
    (void)h, (void)dst, (void)room;
    return Status(StatusCode::kUnimplemented, "read_into_cuda: this client cannot write CUDA memory");
  }
  // map_cuda: waits for the tensor and returns its bytes in place on its GPU where it is on a
  // cuda device of the embedded engine (DLPack export of cuda tensors, no copy);
  // FAILED_PRECONDITION on other devices, UNIMPLEMENTED for a broker (its memory is another
  // process's: read_into_cuda copies into a GPU buffer of the caller).
  virtual Result<CudaMapping> map_cuda(TensorHandle h) {
    (void)h;
    return Status(StatusCode::kUnimplemented,
                  "map_cuda: this client's tensors are not in this process's GPU memory");
  }
  // map_host: waits for the tensor and returns its bytes in place where they are in this
  // process's memory; UNIMPLEMENTED for a remote broker, FAILED_PRECONDITION on a device
  // whose memory is not host memory (then read() copies).
  virtual Result<HostMapping> map_host(TensorHandle h) {
    return Status(StatusCode::kUnimplemented,
                  "map_host: this client's tensors are not in this process's memory");
  }
};

// The default read_into: read(), then one more copy. Clients override it to write the bytes
// straight into `dst`.
inline Result<TensorType> Client::read_into(TensorHandle h, void* dst, size_t room) {
  Result<HostTensor> t = read(h);
  if (!t.ok()) return t.status();
  const size_t n = t->nbytes();
  if (n == 0 || n > room) return t->type();
  if (!dst)
    return Status(StatusCode::kInvalidArgument,
                  "read_into: no destination for " + std::to_string(n) + " bytes");
  std::memcpy(dst, t->data(), n);
  return t->type();
}

struct LocalClientOptions {
  // Device filter like TENSORD_DEVICES ("cpu:0,opencl:*", "none"); empty = read the env.
  std::string devices;
  // Default device like TENSORD_DEVICE; empty = read the env.
  std::string default_device;
  // Compile every graph with the reference kernels only: no fusion, no oneDNN — the oracle
  // conformance tests and the bench compare with. Always a private engine.
  bool reference_kernels = false;
  // Named models (open_model, list_models): a folder of NAME/model.onnx, loaded into the
  // engine on the first open_model/list_models, once per engine. Empty = TENSORD_MODELS.
  std::string models_dir;
};

// An embedded engine in this process. With empty options: the process-wide engine (one per
// process, configured from the environment). With a device filter, a default device or
// reference kernels: a private engine owned by this client (tests, tools).
Result<std::unique_ptr<Client>> make_local_client(const LocalClientOptions& options = {});

// `address` empty: TENSORD_ADDRESS, and if that is unset too, an embedded engine.
Result<std::unique_ptr<Client>> connect(const std::string& address = "");

}  // namespace tensord
