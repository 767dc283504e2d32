// Shared-memory regions: tickets, registering a client's memfd, uploads from and reads into
// a region, lent regions.
#include "rpc/server_internal.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace tensord::rpc::server_impl {

namespace {

// Whether the broker may compute on bytes a client can still write (lent regions): only
// values no kernel reads as an index, a size or a shape, so that a client breaking its promise
// can spoil its own results but never make the broker read or write out of bounds.
bool may_compute_in_place(DType t) { return dtype_is_float(t); }

}  // namespace

grpc::Status Service::RegionTicket(grpc::ServerContext* ctx, const v1::RegionTicketRequest* req,
                                   v1::RegionTicketResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  if (!region_channel_)
    return fail(ctx, errors::Unimplemented("this broker offers no shared memory"));
  std::string tenant;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (SessionState* s = g.state_locked()) tenant = s->tenant;
  }
  auto ticket = region_channel_->issue(g.engine_session(), tenant);
  if (!ticket.ok()) return fail(ctx, ticket.status());
  resp->set_ticket(*ticket);
  resp->set_ttl_ms(std::chrono::milliseconds(RegionChannel::kTicketTtl).count());
  return grpc::Status::OK;
}

grpc::Status Service::RegisterRegion(grpc::ServerContext* ctx, const v1::RegisterRegionRequest* req,
                                     v1::RegisterRegionResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  // Paths are refused without being looked at: nothing is opened, so the answer says
  // nothing about what a path (a /proc/<pid>/fd/<n> of the broker or of another client)
  // points to.
  if (!req->path().empty())
    return fail(ctx, errors::InvalidArgument(
                         "RegisterRegion: regions are not registered by path; pass the memfd "
                         "on the broker's region socket with a ticket (RegionTicket) and name "
                         "the ticket"));
  if (!region_channel_)
    return fail(ctx, errors::Unimplemented("this broker offers no shared memory"));
  if (req->bytes() <= 0 || req->bytes() > (int64_t{1} << 40))
    return fail(ctx, errors::InvalidArgument(
                         "RegisterRegion: region size {} is not in (0, 1 TiB]", req->bytes()));
  auto fd = region_channel_->redeem(g.engine_session(), req->ticket());
  if (!fd.ok()) return fail(ctx, fd.status());
  struct CloseFd {
    int fd;
    ~CloseFd() { close(fd); }  // mapped (or refused): the mapping does not need it
  } close_fd{*fd};
  const int64_t bytes = req->bytes();
  // Every limit before the mapping: the session's region count, its memory limit and its
  // tenant's (the region charged as bytes arriving until it is mapped), the broker's budget
  // of mapped bytes and regions and the tenant's share of it.
  std::string tenant;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SessionState* s = g.state_locked();
    if (!s) return fail(ctx, errors::NotFound("the session ended during RegisterRegion"));
    if (s->regions.size() >= kMaxRegionsPerSession)
      return fail(ctx, errors::ResourceExhausted(
                           "RegisterRegion: a session may register at most {} shared-memory "
                           "regions; unregister some first",
                           kMaxRegionsPerSession));
    tenant = s->tenant;
  }
  if (Status c = g.charge(bytes, "registering a shared-memory region"); !c.ok())
    return fail(ctx, c);
  struct Uncharge {
    const Guard& g;
    int64_t n;
    ~Uncharge() { g.uncharge(n); }
  } uncharge{g, bytes};
  auto ext = engine_->external_bytes(g.engine_session());
  if (!ext.ok()) return fail(ctx, ext.status());
  auto region = open_region(*fd, bytes, tenant);
  if (!region.ok()) return fail(ctx, region.status());
  std::lock_guard<std::mutex> lock(mu_);
  SessionState* s = g.state_locked();
  if (!s) return fail(ctx, errors::NotFound("the session ended during RegisterRegion"));
  if (s->regions.size() >= kMaxRegionsPerSession)
    return fail(ctx, errors::ResourceExhausted(
                         "RegisterRegion: a session may register at most {} shared-memory "
                         "regions; unregister some first",
                         kMaxRegionsPerSession));
  const uint64_t id = s->next_region++;
  // Charged as a region from here on (Uncharge takes it off the bytes arriving; the lock is
  // held throughout, so nothing sees it counted twice or not at all).
  s->pending_bytes -= bytes;
  uncharge.n = 0;
  (*region)->attach(std::move(ext).value());  // the engine's limit checks see it from now on
  s->regions.emplace(id, std::move(region).value());
  resp->set_region(id);
  return grpc::Status::OK;
}

grpc::Status Service::UnregisterRegion(grpc::ServerContext* ctx, const v1::RegionRequest* req,
                                       v1::UnregisterRegionResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  std::shared_ptr<Region> dead;  // unmapped outside the lock
  std::lock_guard<std::mutex> lock(mu_);
  SessionState* s = g.state_locked();
  auto it = s ? s->regions.find(req->region()) : decltype(s->regions.end()){};
  if (!s || it == s->regions.end())
    return fail(ctx, errors::NotFound("shared-memory region {} is not registered in this session",
                                      req->region()));
  dead = std::move(it->second);
  s->regions.erase(it);
  dead->detach();  // lent tensors may keep it mapped, charged by the engine as tensors
  return grpc::Status::OK;
}

grpc::Status Service::UploadRegion(grpc::ServerContext* ctx, const v1::UploadRegionRequest* req,
                                   v1::UploadResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  auto size = check_header(g, req->header());
  if (!size.ok()) return fail(ctx, size.status());
  auto region = find_region(g, req->region());
  if (!region.ok()) return fail(ctx, region.status());
  auto ptr = (*region)->span(req->offset(), *size, "upload");
  if (!ptr.ok()) return fail(ctx, ptr.status());
  const auto& h = req->header();
  const DType dtype = static_cast<DType>(h.dtype());
  if (req->lend() && may_compute_in_place(dtype)) {
    // Lent: the tensor is the region's bytes (a cpu device computes on them where they
    // are); the region counts as in use until the last tensor over it goes.
    struct Pin {
      std::shared_ptr<Region> region;
      int64_t bytes = 0;
      ~Pin() { region->unlend(bytes); }
    };
    (*region)->lend(*size);  // the engine charges them to the session now, as a tensor
    auto pin = std::make_shared<Pin>();
    pin->region = *region;
    pin->bytes = *size;
    TensorView view{dtype, Shape(h.shape().begin(), h.shape().end()), *ptr};
    auto handle = engine_->upload_external(g.engine_session(), view, h.device(), std::move(pin));
    if (!handle.ok()) return fail(ctx, handle.status());
    resp->set_handle(*handle);
    return grpc::Status::OK;
  }
  return finish_upload(ctx, g, h, *ptr, resp);
}

grpc::Status Service::ReclaimRegions(grpc::ServerContext* ctx, const v1::ReclaimRegionsRequest* req,
                                     v1::ReclaimRegionsResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  std::lock_guard<std::mutex> lock(mu_);
  SessionState* s = g.state_locked();
  for (uint64_t id : req->regions()) {
    auto it = s ? s->regions.find(id) : decltype(s->regions.end()){};
    if (!s || it == s->regions.end() || it->second->lent.load() == 0) resp->add_free(id);
  }
  return grpc::Status::OK;
}

grpc::Status Service::OpenArena(grpc::ServerContext* ctx, const v1::OpenArenaRequest* req,
                                v1::OpenArenaResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  if (!region_channel_ || options_.shm_arena_bytes <= 0)
    return fail(ctx, errors::Unimplemented("this broker offers no arenas"));
  std::shared_ptr<ShmArena> arena;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SessionState* s = g.state_locked();
    if (!s) return fail(ctx, errors::NotFound("the session ended during OpenArena"));
    arena = s->arena;
  }
  if (!arena) {
    int64_t bytes = options_.shm_arena_bytes;
    if (options_.session_memory_limit > 0) bytes = std::min(bytes, options_.session_memory_limit);
    auto made = ShmArena::create(static_cast<size_t>(bytes),
                                 static_cast<size_t>(std::max<int64_t>(options_.shm_arena_min_bytes, 0)));
    if (!made.ok()) return fail(ctx, made.status());
    std::lock_guard<std::mutex> lock(mu_);
    SessionState* s = g.state_locked();
    if (!s) return fail(ctx, errors::NotFound("the session ended during OpenArena"));
    if (!s->arena) {  // else another call made one first: that one stays
      Status st = engine_->set_session_memory(g.engine_session(), *made);
      if (!st.ok()) return fail(ctx, st);
      s->arena = *made;
    }
    arena = s->arena;
  }
  std::string tenant;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (SessionState* s = g.state_locked()) tenant = s->tenant;
  }
  auto fd = arena->client_fd();
  if (!fd.ok()) return fail(ctx, fd.status());
  auto ticket = region_channel_->offer(g.engine_session(), *fd, tenant);  // owns fd now
  if (!ticket.ok()) return fail(ctx, ticket.status());
  resp->set_ticket(*ticket);
  resp->set_bytes(static_cast<int64_t>(arena->size()));
  resp->set_min_bytes(static_cast<int64_t>(arena->min_bytes()));
  return grpc::Status::OK;
}

// A value of the session's arena, answered by its place there (ReadRegionRequest.arena):
// true when it was (or the wait for it failed: `out` says so).
bool Service::read_from_arena(grpc::ServerContext* ctx, const Guard& g,
                              const v1::ReadRegionRequest& req, v1::ReadRegionResponse* resp,
                              grpc::Status* out) {
  std::shared_ptr<ShmArena> arena;
  {
    std::lock_guard<std::mutex> lock(mu_);
    SessionState* s = g.state_locked();
    if (s) arena = s->arena;
  }
  if (!arena) return false;
  auto call = call_token(ctx);
  auto mapped = engine_->map_host(g.engine_session(), req.handle(), call.get());
  if (!mapped.ok()) {
    if (mapped.status().code() == StatusCode::kFailedPrecondition) return false;  // elsewhere
    *out = fail(ctx, mapped.status());
    return true;
  }
  auto n = checked_byte_size(mapped->view.dtype, mapped->view.shape);
  if (!n.ok() || *n == 0) return false;
  const int64_t at = arena->offset_of(mapped->view.data, static_cast<size_t>(*n));
  if (at < 0) return false;
  auto* h = resp->mutable_header();
  h->set_dtype(static_cast<int32_t>(mapped->view.dtype));
  h->mutable_shape()->Assign(mapped->view.shape.begin(), mapped->view.shape.end());
  h->set_total_bytes(*n);
  resp->set_in_arena(true);
  resp->set_arena_offset(at);
  *out = grpc::Status::OK;
  return true;
}

grpc::Status Service::ReadRegion(grpc::ServerContext* ctx, const v1::ReadRegionRequest* req,
                                 v1::ReadRegionResponse* resp) {
  Guard g(this, ctx);
  if (!g.ok()) return fail(ctx, g.status());
  if (grpc::Status st; req->arena() && read_from_arena(ctx, g, *req, resp, &st)) return st;
  auto region = find_region(g, req->region());
  if (!region.ok()) return fail(ctx, region.status());
  if (req->offset() < 0 || req->offset() > (*region)->size || req->max_bytes() < 0)
    return fail(ctx, errors::OutOfRange(
                         "read: offset {} (max_bytes {}) is outside shared-memory region '{}' "
                         "of {} bytes",
                         req->offset(), req->max_bytes(), (*region)->name, (*region)->size));
  if (req->value_offset() != 0 || req->value_length() != 0)
    return read_region_part(ctx, g, **region, *req, resp);
  const int64_t room = req->max_bytes() > 0
                           ? std::min(req->max_bytes(), (*region)->size - req->offset())
                           : (*region)->size - req->offset();
  // A statically known size that does not fit is answered before the value is read.
  auto info = engine_->info(g.engine_session(), req->handle());
  if (!info.ok()) return fail(ctx, info.status());
  auto known = checked_byte_size(info->type.dtype, info->type.shape);
  auto* h = resp->mutable_header();
  if (known.ok() && *known > room) {
    h->set_dtype(static_cast<int32_t>(info->type.dtype));
    h->mutable_shape()->Assign(info->type.shape.begin(), info->type.shape.end());
    h->set_total_bytes(*known);
    return grpc::Status::OK;  // written = false: the client retries with room enough
  }
  // Straight into the region (no host copy in between). The span is checked first, against
  // the room the value can take; a data-dependent size is checked again once known.
  const int64_t span_bytes = known.ok() ? *known : room;
  auto ptr = (*region)->span(req->offset(), span_bytes, "read");
  if (!ptr.ok()) return fail(ctx, ptr.status());
  auto t = engine_->read_into(g.engine_session(), req->handle(), *ptr,
                              static_cast<size_t>(span_bytes));
  if (!t.ok()) return fail(ctx, t.status());
  auto bytes = checked_byte_size(t->dtype, t->shape);
  if (!bytes.ok()) return fail(ctx, bytes.status());
  h->set_dtype(static_cast<int32_t>(t->dtype));
  h->mutable_shape()->Assign(t->shape.begin(), t->shape.end());
  h->set_total_bytes(*bytes);
  resp->set_written(*bytes <= span_bytes);
  return grpc::Status::OK;
}

// A part of a value into a region (ReadRegionRequest.value_offset/value_length): the client
// copies one part out while the broker writes the next, so a large read costs about one copy
// instead of two in a row. The value's bytes are taken where they are (Engine::map_host, on a
// device computing on host memory); other devices copy the value once into a pooled block.
grpc::Status Service::read_region_part(grpc::ServerContext* ctx, const Guard& g, Region& region,
                                       const v1::ReadRegionRequest& req,
                                       v1::ReadRegionResponse* resp) {
  if (req.value_offset() < 0 || req.value_length() < 0 || req.max_bytes() < 0)
    return fail(ctx, errors::InvalidArgument(
                         "read: value_offset {}, value_length {} and max_bytes {} must not be "
                         "negative",
                         req.value_offset(), req.value_length(), req.max_bytes()));
  auto call = call_token(ctx);
  TensorType type;
  const unsigned char* bytes = nullptr;
  std::shared_ptr<const void> keep;
  int64_t total = 0;
  auto mapped = engine_->map_host(g.engine_session(), req.handle(), call.get());
  if (mapped.ok()) {
    type = {mapped->view.dtype, mapped->view.shape};
    bytes = static_cast<const unsigned char*>(mapped->view.data);
    keep = std::move(mapped->keepalive);
    auto n = checked_byte_size(type.dtype, type.shape);
    if (!n.ok()) return fail(ctx, n.status());
    total = *n;
  } else if (mapped.status().code() == StatusCode::kFailedPrecondition) {
    auto info = engine_->info(g.engine_session(), req.handle(), call.get());
    if (!info.ok()) return fail(ctx, info.status());
    auto n = checked_byte_size(info->type.dtype, info->type.shape);
    if (!n.ok()) return fail(ctx, n.status());
    std::shared_ptr<unsigned char> block;
    if (*n > 0 && (req.max_bytes() == 0 || *n <= req.max_bytes())) {
      block = host_block(static_cast<size_t>(*n));
      if (!block)
        return fail(ctx, errors::ResourceExhausted(
                             "read: cannot hold {} bytes in the broker's host memory", *n));
    }
    auto t = engine_->read_into(g.engine_session(), req.handle(), block.get(),
                                block ? static_cast<size_t>(*n) : 0, call.get());
    if (!t.ok()) return fail(ctx, t.status());
    type = *t;
    auto m = checked_byte_size(type.dtype, type.shape);
    if (!m.ok()) return fail(ctx, m.status());
    total = *m;
    if (total > 0 && block && total > *n)
      return fail(ctx, errors::Internal("read: the value of handle {} changed size while read",
                                        req.handle()));
    bytes = block.get();
    keep = std::move(block);
  } else {
    return fail(ctx, mapped.status());
  }
  auto* h = resp->mutable_header();
  h->set_dtype(static_cast<int32_t>(type.dtype));
  h->mutable_shape()->Assign(type.shape.begin(), type.shape.end());
  h->set_total_bytes(total);
  if (req.max_bytes() > 0 && total > req.max_bytes()) return grpc::Status::OK;  // no room
  if (req.value_offset() > total)
    return fail(ctx, errors::OutOfRange("read: value_offset {} is past the {} bytes of handle {}",
                                        req.value_offset(), total, req.handle()));
  const int64_t left = total - req.value_offset();
  const int64_t n = req.value_length() > 0 ? std::min(req.value_length(), left) : left;
  if (n > 0 && !bytes)
    return fail(ctx, errors::Internal("read: no bytes for handle {}", req.handle()));
  auto ptr = region.span(req.offset(), n, "read");
  if (!ptr.ok()) return fail(ctx, ptr.status());
  if (n) std::memcpy(*ptr, bytes + req.value_offset(), static_cast<size_t>(n));
  resp->set_written(true);
  resp->set_part_bytes(n);
  return grpc::Status::OK;
}

Result<std::shared_ptr<Region>> Service::find_region(const Guard& g, uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  SessionState* s = g.state_locked();
  if (s) {
    auto it = s->regions.find(id);
    if (it != s->regions.end()) return it->second;
  }
  return errors::NotFound(
      "shared-memory region {} is not registered in this session (RegisterRegion first)", id);
}

int64_t default_max_region_bytes() {
  // Regions are the clients' shared memory: together they can hold no more than the machine
  // has, so a real workload never needs more mapped than the physical memory.
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  int64_t n = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{64} << 30;
  n = std::min(n, int64_t{32} << 40);  // a quarter of x86-64's 128 TiB of user address space
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    n = std::min(n, static_cast<int64_t>(as.rlim_cur / 2));
  return std::max<int64_t>(n, 1);
}

int64_t default_max_regions() {
  // One mapping each: a quarter of the process's mappings (vm.max_map_count, 65530 by
  // default), the rest left for the allocator, thread stacks and the arenas.
  int64_t maps = 65530;
  if (FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
    long long v = 0;
    if (std::fscanf(f, "%lld", &v) == 1 && v > 0) maps = v;
    std::fclose(f);
  }
  return std::max<int64_t>(maps / 4, 1);
}

std::shared_ptr<RegionBudget> Service::tenant_region_budget_locked(const std::string& tenant) {
  auto& b = tenant_region_budgets_[tenant];
  if (!b) b = std::make_shared<RegionBudget>();
  return b;
}

Status Service::take_region_budget(const std::string& tenant, int64_t bytes, Region& region) {
  if (!region_budget_->take(bytes, max_region_bytes_, max_regions_))
    return errors::ResourceExhausted(
        "RegisterRegion: the broker maps at most {} bytes in at most {} shared-memory regions "
        "(tensord serve --max-region-bytes, --max-regions); {} bytes in {} regions are mapped, "
        "{} more bytes do not fit",
        max_region_bytes_, max_regions_, region_budget_->bytes.load(), region_budget_->count.load(),
        bytes);
  region.broker_budget = region_budget_;  // given back by the region from here on
  std::shared_ptr<RegionBudget> mine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    mine = tenant_region_budget_locked(tenant);
  }
  if (!mine->take(bytes, tenant_region_bytes_, tenant_regions_))
    return errors::ResourceExhausted(
        "RegisterRegion: a tenant may map at most {} bytes in at most {} shared-memory "
        "regions (half of tensord serve --max-region-bytes {}, --max-regions {}); this "
        "tenant has {} bytes in {} regions mapped, {} more bytes do not fit",
        tenant_region_bytes_, tenant_regions_, max_region_bytes_, max_regions_, mine->bytes.load(),
        mine->count.load(), bytes);
  region.tenant_budget = std::move(mine);
  return OkStatus();
}

// Maps a client's region from the descriptor it passed (see Region): a memfd on tmpfs,
// sealed against shrinking, at least `bytes` long, within the broker's budget of mapped
// regions and the tenant's share of it. The caller keeps the descriptor.
Result<std::shared_ptr<Region>> Service::open_region(int fd, int64_t bytes,
                                                     const std::string& tenant) {
  auto r = std::make_shared<Region>();
  {
    char link[320] = {};
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = readlink(self.c_str(), link, sizeof link - 1);
    std::string name = n > 0 ? std::string(link, static_cast<size_t>(n)) : "";
    if (name.rfind("/memfd:", 0) == 0) name = name.substr(7);
    if (const size_t d = name.rfind(" (deleted)"); d != std::string::npos) name.resize(d);
    r->name = name.empty() ? "memfd" : name;
  }
  // Seals first, then the size: once F_SEAL_SHRINK is seen, the size read after it can
  // only grow, so the whole mapping stays backed.
  struct statfs fs {};
  const int seals =
      fstatfs(fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC ? fcntl(fd, F_GET_SEALS) : -1;
  struct stat st {};
  if (seals < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return errors::FailedPrecondition(
        "RegisterRegion: the descriptor is not a memfd (create the region with "
        "memfd_create(MFD_ALLOW_SEALING), without MFD_HUGETLB)");
  if (!(seals & F_SEAL_SHRINK))
    return errors::FailedPrecondition(
        "RegisterRegion: region '{}' is not sealed against shrinking: seal it with "
        "F_SEAL_SHRINK (fcntl F_ADD_SEALS; memfd_create with MFD_ALLOW_SEALING), so that it "
        "can never become shorter than the broker's mapping",
        r->name);
  if (seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE))
    return errors::FailedPrecondition(
        "RegisterRegion: region '{}' is sealed against writing (F_SEAL_WRITE or "
        "F_SEAL_FUTURE_WRITE): the broker writes read results into it",
        r->name);
  if (st.st_size < bytes)
    return errors::InvalidArgument(
        "RegisterRegion: region '{}' is {} bytes, smaller than the {} bytes declared", r->name,
        static_cast<int64_t>(st.st_size), bytes);
  r->size = bytes;  // what the budgets get back, mapped or not
  TD_RETURN_IF_ERROR(take_region_budget(tenant, bytes, *r));
  void* base =
      mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED)
    return errors::ResourceExhausted("RegisterRegion: cannot map {} bytes of region '{}': {}",
                                     bytes, r->name, std::strerror(errno));
  r->base = static_cast<unsigned char*>(base);
  r->size = bytes;
  return r;
}

}  // namespace tensord::rpc::server_impl
