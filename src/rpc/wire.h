// Conversions between tensord's types and the tensord.v1 wire messages, and between Status and
// grpc::Status. Internal to src/rpc (it includes the generated protobuf headers).
//
// Everything read from the wire is untrusted: the from_proto functions validate dtypes, shapes
// and byte counts and return INVALID_ARGUMENT naming the offending value; they never assert.
#pragma once

#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "tensord.pb.h"
#include "tensord/client.h"
#include "tensord/device.h"
#include "tensord/graph.h"
#include "tensord/status.h"

namespace tensord::rpc {

// Metadata keys (see proto/tensord.proto).
inline constexpr const char* kSessionKey = "tensord-session";
inline constexpr const char* kErrorKey = "tensord-error";
// A RunModel/Execute call carrying this metadata (any value) gets its phases on the broker
// back in the trailing metadata of the same name: "session=U parse=U prepare=U handoff=U
// run=U outputs=U handler=U" in microseconds, then "entry_ns=N exit_ns=N": the handler's start
// and end on the steady clock (CLOCK_MONOTONIC: comparable with a client's on the same host,
// which splits the transport into the request's way there and the answer's way back).
inline constexpr const char* kBreakdownKey = "tensord-breakdown";

// Bulk bytes travel in chunks of this size (Upload, Read). Large enough that per-message
// overhead vanishes, small enough to pipeline through HTTP/2 flow control.
inline constexpr int64_t kDefaultChunkBytes = 2 << 20;
// The largest single message either side accepts: graphs carry their initializers inline, so
// a model's weights arrive in one Execute message (protobuf's own limit is 2 GiB).
inline constexpr int kMaxMessageBytes = 1 << 30;

// The most bytes of output values one Execute/RunModel answer carries inline.
inline constexpr int64_t kMaxInlineBytes = 64 << 20;
// The run channel (OpenRunChannel): the largest ChannelRequest or ChannelAnswer either side
// sends (a SOCK_SEQPACKET message must fit the sender's send buffer: see seqpacket_send_limit),
// and the most bytes of output values an answer carries inline (larger outputs are read by
// handle). Both above the clients' default inline budget (256 KiB).
inline constexpr int64_t kChannelMaxMessage = 320 << 10;
inline constexpr int64_t kChannelMaxInlineBytes = 288 << 10;
// Metadata key of the bearer token ("authorization: Bearer <token>").
inline constexpr const char* kAuthKey = "authorization";

// Initialises gRPC for the rest of the process (once; never shut down). Without a lasting
// reference, destroying the last channel or server runs grpc_shutdown(), which joins gRPC's
// executor threads and can block for up to 10 s while they sit in a poll.
void keep_grpc_initialized();

// This machine's boot id ("" if unknown): equal ids on client and broker mean the same running
// kernel, so shared memory between them works.
std::string host_boot_id();

// Same numbers on both sides (tensord::StatusCode is gRPC's numbering); messages unchanged.
grpc::Status to_grpc(const Status& s);
Status from_grpc(const grpc::Status& s);

// CUDA IPC memory (CudaIpcMemory): the handle, where the bytes are in its allocation, the GPU,
// and the sender's host (`host_id`: its boot id). from_proto checks the sizes (a 64-byte
// handle, offsets and sizes not negative) and that the kind is CUDA IPC.
void to_proto(const ForeignMemory& src, const std::string& host_id, v1::CudaIpcMemory* dst);
Result<ForeignMemory> from_proto(const v1::CudaIpcMemory& src);

void to_proto(const DeviceInfo& src, v1::Device* dst);
DeviceInfo from_proto(const v1::Device& src);

// Named models (ListModels, OpenModel). A value type from the wire that does not validate
// is left unknown (dtype kUndefined, no dims).
void to_proto(const ModelInfo& src, v1::ModelInfo* dst);
ModelInfo from_proto(const v1::ModelInfo& src);

void to_proto(const TensorType& src, v1::TensorType* dst);
// dtype 0 is allowed (unknown); otherwise the dtype must be valid and dims >= -1.
Result<TensorType> from_proto(const v1::TensorType& src);

// Checks a dtype number and a shape read from the wire; returns the byte size.
Result<int64_t> checked_wire_size(int32_t dtype,
                                  const google::protobuf::RepeatedField<int64_t>& shape,
                                  const char* what);

void to_proto(const HostTensor& src, v1::Tensor* dst);
Result<HostTensor> from_proto(const v1::Tensor& src);

// Bounds on a graph read from the wire (a client's graph is compiled by the broker: its
// size and nesting cost the broker's time and memory). INVALID_ARGUMENT past either.
struct GraphLimits {
  int64_t max_nodes = 100000;  // nodes in all, subgraphs included
  int max_depth = 16;          // If/Loop/Scan bodies inside bodies
};

void to_proto(const Graph& src, v1::Graph* dst);
Result<Graph> from_proto(const v1::Graph& src, const GraphLimits& limits = {});
// The same limits, checked by a client before it sends a graph (a graph nested deeper than
// protobuf's recursion limit could not even be decoded by the broker: a bare INTERNAL).
Status check_graph_limits(const Graph& graph, const GraphLimits& limits = {});

}  // namespace tensord::rpc
