// What the broker says about itself: the open sessions for the status page, and BrokerStatus
// (`tensord status`), the JSON document of the Monitor (rpc/monitor.h) that GET /api/status
// serves too.
#include <algorithm>

#include "rpc/server_internal.h"

namespace tensord::rpc::server_impl {

std::vector<SessionSummary> Service::session_summaries() const {
  struct Row {
    SessionSummary s;
    SessionId engine_session;
  };
  std::vector<Row> rows;
  const auto now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    rows.reserve(sessions_.size());
    for (const auto& [id, st] : sessions_) {
      Row r;
      r.s.tenant = st.tenant;
      r.s.in_flight = st.in_flight;
      r.s.regions = static_cast<int>(st.regions.size());
      r.s.region_bytes = st.region_bytes();
      r.s.age_s = std::chrono::duration<double>(now - st.opened).count();
      r.s.idle_s = st.in_flight > 0 ? 0.0 : std::chrono::duration<double>(now - st.last_seen).count();
      r.s.bytes = st.pending_bytes;
      r.engine_session = st.engine_session;
      rows.push_back(std::move(r));
    }
  }
  std::vector<SessionSummary> out;
  out.reserve(rows.size());
  for (auto& r : rows) {  // the engine's lock, outside ours
    r.s.bytes += std::max<int64_t>(0, engine_->session_bytes(r.engine_session));
    out.push_back(std::move(r.s));
  }
  return out;
}

Result<StatusView> Service::status_view(grpc::ServerContextBase* ctx) const {
  bool is_operator = false;
  auto tenant = tenants_->authenticate(ctx->client_metadata(), &is_operator);
  if (!tenant.ok()) return tenant.status();
  StatusView v;
  v.all = is_operator;
  v.tenant = *tenant;
  return v;
}

grpc::Status Service::BrokerStatus(grpc::ServerContext* ctx, const v1::BrokerStatusRequest* req,
                                   v1::BrokerStatusResponse* resp) {
  auto view = status_view(ctx);
  if (!view.ok()) return fail(ctx, view.status());
  const Monitor* monitor = monitor_.load();
  if (!monitor) return fail(ctx, errors::Unavailable("the broker is starting: no status yet"));
  const int history = std::clamp(req->history_seconds(), 0, 600);
  resp->set_json(monitor->status(history, *view).dump(-1, ' ', false,
                                                nlohmann::json::error_handler_t::replace));
  return grpc::Status::OK;
}

}  // namespace tensord::rpc::server_impl
