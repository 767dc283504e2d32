// CUDA IPC (same host): a client hands the broker a GPU buffer by its CUDA IPC memory handle
// and the broker copies device to device, into a new tensor (UploadCudaIpc) or out of one into
// the client's buffer (ReadCudaIpc). proto/tensord.proto, CudaIpcMemory; the device side is
// Device::copy_foreign (src/backends/cuda), the engine's Engine::upload_foreign.
#include "rpc/server_internal.h"

namespace tensord::rpc::server_impl {

// The handle, checked: well formed, and sent from this host (an IPC handle means nothing on
// another machine: refused before any driver call).
Result<ForeignMemory> Service::cuda_ipc_memory(const v1::CudaIpcMemory& m) const {
  if (m.host_id().empty() || m.host_id() != host_id_)
    return errors::FailedPrecondition(
        "CUDA IPC: the client runs on another host than the broker (boot id '{}', the broker's '{}'); "
        "CUDA IPC memory handles work only on the broker's own host: send the bytes with Upload/Read",
        m.host_id(), host_id_);
  return from_proto(m);
}

grpc::Status Service::UploadCudaIpc(grpc::ServerContext* ctx, const v1::UploadCudaIpcRequest* req,
                                    v1::UploadResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  auto memory = cuda_ipc_memory(req->memory());
  if (!memory.ok()) return fail(ctx, memory.status().with_context("upload"));
  auto size = check_header(g, req->header());
  if (!size.ok()) return fail(ctx, size.status());
  const auto& h = req->header();
  auto handle = engine_->upload_foreign(g.engine_session(), static_cast<DType>(h.dtype()),
                                        Shape(h.shape().begin(), h.shape().end()), *memory, h.device());
  if (!handle.ok()) return fail(ctx, handle.status().with_context("upload (CUDA IPC)"));
  resp->set_handle(*handle);
  return grpc::Status::OK;
}

grpc::Status Service::ReadCudaIpc(grpc::ServerContext* ctx, const v1::ReadCudaIpcRequest* req,
                                  v1::ReadCudaIpcResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  auto memory = cuda_ipc_memory(req->memory());
  if (!memory.ok()) return fail(ctx, memory.status().with_context("read"));
  auto call = call_token(ctx);
  auto t = engine_->read_into_foreign(g.engine_session(), req->handle(), *memory, call.get());
  if (!t.ok()) return fail(ctx, t.status().with_context("read (CUDA IPC)"));
  auto bytes = checked_byte_size(t->dtype, t->shape);
  if (!bytes.ok()) return fail(ctx, bytes.status());
  auto* hd = resp->mutable_header();
  hd->set_dtype(static_cast<int32_t>(t->dtype));
  hd->mutable_shape()->Assign(t->shape.begin(), t->shape.end());
  hd->set_total_bytes(*bytes);
  resp->set_written(*bytes > 0 && static_cast<uint64_t>(*bytes) <= memory->size);
  return grpc::Status::OK;
}

}  // namespace tensord::rpc::server_impl
