#include "rpc/batcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>

#include "core/errors.h"
#include "core/log.h"

namespace tensord::rpc {

using Clock = std::chrono::steady_clock;

const std::vector<int64_t> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128, 256};

namespace {

int64_t micros(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::microseconds>(d).count();
}

}  // namespace

struct ModelRunner::Request {
  SessionId session = 0;
  std::string tenant;
  ModelHandle handle = 0;
  std::vector<TensorHandle> inputs;
  std::vector<HostTensor> host;  // the inputs' values
  int64_t rows = 0;
  std::string signature;              // dtypes and dims after the first
  std::shared_ptr<CancelToken> call;  // the caller's (its poll is for the caller's thread only)
  std::shared_ptr<CancelToken> work = std::make_shared<CancelToken>();  // fired when it gives up
  Clock::time_point enqueued;
  // The answer (under mu).
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool abandoned = false;  // the caller gave up: outputs delivered later are released
  Result<std::vector<TensorHandle>> result = errors::Unavailable("not run");
};

struct ModelRunner::Stats {
  std::mutex mu;
  ModelCounters counters;
};

struct ModelRunner::Model {
  std::string name;  // the engine's
  ModelConfig config;
  ModelHandle handle = 0;  // in the runner's first session (instances[0].handle)
  // Instance k: the runner's session k and its handle of the model (read by the workers and
  // at unload; sessions_ itself may grow meanwhile).
  std::vector<Instance> instances;
  uint64_t serial = 0;     // the engine's load of `name` this model runs (Engine::named_model_of)
  size_t num_inputs = 0;
  std::vector<std::string> devices;
  // Batch sizes a batch is padded up to (zero rows, their outputs dropped), when every size up
  // to max_batch_size on every device would be more compiled forms than a tenant may keep
  // (EngineOptions::named_model_forms_per_tenant): powers of two and max_batch_size. Empty:
  // batches run at their own size.
  std::vector<int64_t> padded_sizes;
  // One row of each input (its declared shape without the batch axis) and its dtype, for the
  // warm-up runs; empty when a dimension past the first is not declared.
  std::vector<TensorType> row_types;
  std::atomic<uint64_t> next_device{0};  // unbatched runs over a config's device list
  // Queue (under mu): per tenant, in arrival order; `next` is where the next round starts.
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::deque<std::shared_ptr<Request>>> queues;
  size_t queued = 0;
  std::string next;
  bool retired = false;  // replaced: takes no more requests; its workers stop once it is empty
  int warming = 0;       // devices whose first worker is still warming its forms (under mu)
  int workers = 0;       // running (the last one out of a retired model unloads `handle`)
  std::vector<std::thread> threads;  // the workers (under the runner's mu_)
  std::atomic<size_t> exited{0};     // workers past their last touch of this model
  std::shared_ptr<Stats> stats;  // shared with the name's later loads

  void count_run(int64_t rows, int64_t compute_us) {
    std::lock_guard<std::mutex> lock(stats->mu);
    ModelCounters& counters = stats->counters;
    counters.batches++;
    counters.batch_rows += rows;
    counters.compute_us += compute_us;
    size_t b = 0;
    while (b < kBatchBuckets.size() && rows > kBatchBuckets[b]) ++b;
    counters.batch_size_counts[b]++;
  }
  void count_request(bool ok, int64_t queue_us) {
    std::lock_guard<std::mutex> lock(stats->mu);
    stats->counters.requests++;
    stats->counters.failures += !ok;
    stats->counters.queue_us += queue_us;
  }
  void count_queue(int64_t queue_us) {
    std::lock_guard<std::mutex> lock(stats->mu);
    stats->counters.queue_us += queue_us;
  }
};

ModelRunner::ModelRunner(std::shared_ptr<Engine> engine, std::map<std::string, ModelConfig> configs)
    : engine_(std::move(engine)), configs_(std::move(configs)) {}

ModelRunner::~ModelRunner() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto wake = [](Model& m) {
      std::lock_guard<std::mutex> l(m.mu);
      m.cv.notify_all();
    };
    for (auto& [name, m] : models_) wake(*m);
    for (auto& m : retired_) wake(*m);
  }
  auto join = [](Model& m) {
    for (std::thread& t : m.threads) t.join();
  };
  for (auto& [name, m] : models_) join(*m);
  for (auto& m : retired_) join(*m);
  auto fail_queued = [](Model& m) {
    for (auto& [tenant, q] : m.queues)
      for (auto& r : q) {
        std::lock_guard<std::mutex> l(r->mu);
        r->result = errors::Unavailable("the broker is stopping");
        r->done = true;
        r->cv.notify_all();
      }
  };
  for (auto& [name, m] : models_) fail_queued(*m);
  for (auto& m : retired_) fail_queued(*m);
  for (SessionId s : sessions_) (void)engine_->close_session(s);
}

void ModelRunner::retire_locked(const std::string& name) {
  auto it = models_.find(name);
  if (it == models_.end()) return;
  std::shared_ptr<Model> m = std::move(it->second);
  models_.erase(it);
  {
    std::lock_guard<std::mutex> l(m->mu);
    m->retired = true;
    m->cv.notify_all();
    if (m->workers == 0) unload_instances(*m);
  }
  retired_.push_back(std::move(m));  // callers inside run() and its workers may still hold it
}

void ModelRunner::reap_locked() {
  for (auto it = retired_.begin(); it != retired_.end();) {
    Model& m = **it;
    if (it->use_count() > 1 || m.exited.load(std::memory_order_acquire) < m.threads.size()) {
      ++it;
      continue;
    }
    for (std::thread& t : m.threads) t.join();  // each has returned from worker() already
    it = retired_.erase(it);
  }
}

namespace {
// Engine name `n` is model `model` or one of its versions ("model:2").
bool entry_of(const std::string& n, const std::string& model) {
  return n == model || (n.size() > model.size() && n.compare(0, model.size(), model) == 0 &&
                        n[model.size()] == ':');
}
}  // namespace

void ModelRunner::replace_models(const std::string& model,
                                 const std::map<std::string, ModelConfig>& configs) {
  auto ours = [&](const std::string& n) { return entry_of(n, model); };
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> names;
  for (const auto& [n, m] : models_)
    if (ours(n)) names.push_back(n);
  for (const std::string& n : names) retire_locked(n);
  reap_locked();  // an earlier load's, once its last request has gone
  for (auto it = configs_.begin(); it != configs_.end();)
    it = ours(it->first) ? configs_.erase(it) : std::next(it);
  for (const auto& [n, c] : configs) configs_[n] = c;
  // An unloaded name's counters go (a reload keeps them, as the name is still served).
  for (auto it = stats_.begin(); it != stats_.end();)
    it = ours(it->first) && !configs.count(it->first) && !(it->first == model && !configs.empty())
             ? stats_.erase(it)
             : std::next(it);
}

void ModelRunner::start(const std::string& model) {
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [n, c] : configs_) {
      if ((model.empty() || entry_of(n, model)) && c.dynamic_batching && c.max_batch_size > 0) names.push_back(n);
    }
  }
  bool current = true;
  for (const std::string& n : names) {
    // Serial 0: the engine's current load of the name (model_for reads its serial).
    const std::shared_ptr<Model> m = model_for(n, 0, &current);
    std::unique_lock<std::mutex> lock(m->mu);
    m->cv.wait(lock, [&] { return m->warming == 0 || stop_; });
  }
}

std::shared_ptr<ModelRunner::Model> ModelRunner::model_for(const std::string& name,
                                                          uint64_t serial, bool* current) {
  std::lock_guard<std::mutex> lock(mu_);
  *current = true;
  auto it = models_.find(name);
  if (it != models_.end()) {
    const std::shared_ptr<Model>& have = it->second;
    if (serial <= have->serial || have->serial == 0) {
      *current = serial == have->serial || have->serial == 0;
      return have;
    }
    retire_locked(name);  // a newer load than the runner's (model control)
    reap_locked();
  }
  auto m = std::make_shared<Model>();
  m->name = name;
  m->serial = serial;
  std::shared_ptr<Stats>& stats = stats_[name];
  if (!stats) stats = std::make_shared<Stats>();
  m->stats = stats;
  auto c = configs_.find(name);
  if (c != configs_.end()) {
    m->config = c->second;
  } else {
    m->config.model = name;
  }
  if (stats->counters.batch_size_counts.empty()) {
    stats->counters.model = m->config.model.empty() ? name : m->config.model;
    stats->counters.version = m->config.version > 0 ? std::to_string(m->config.version) : "";
    stats->counters.batch_size_counts.assign(kBatchBuckets.size() + 1, 0);
  }
  // The batches' session is opened with the first batched model (an engine session counts
  // in tensord_sessions_open).
  const bool batched = m->config.dynamic_batching && m->config.max_batch_size > 0;
  if (batched && sessions_.empty()) sessions_.push_back(engine_->open_session());
  ModelInfo info;
  auto h = batched ? engine_->open_named_model(sessions_[0], name, &info)
                   : Result<ModelHandle>(errors::NotFound("not batched"));
  if (h.ok()) {
    m->handle = *h;
    m->instances.push_back({sessions_[0], *h});
    (void)engine_->named_model_of(sessions_[0], m->handle, &m->serial);
    m->devices =
        m->config.devices.empty() ? std::vector<std::string>{info.device} : m->config.devices;
    if (m->config.instances <= 0) m->config.instances = default_instances(m->devices);
    const size_t instances = static_cast<size_t>(m->config.instances);
    while (sessions_.size() < instances) sessions_.push_back(engine_->open_session());
    for (size_t k = 1; k < instances; ++k) {
      // The same load of the model (a reload between the two opens would differ: then the
      // extra instances run the first session's handle, one batch at a time).
      uint64_t serial_k = 0;
      auto hk = engine_->open_named_model(sessions_[k], name, nullptr);
      if (hk.ok()) (void)engine_->named_model_of(sessions_[k], *hk, &serial_k);
      if (hk.ok() && serial_k == m->serial) {
        m->instances.push_back({sessions_[k], *hk});
      } else {
        if (hk.ok()) (void)engine_->unload(sessions_[k], *hk);
        break;
      }
    }
    *current = serial == m->serial;
    m->num_inputs = info.inputs.size();
    for (const ValueInfo& v : info.inputs) {
      TensorType row{v.type.dtype, v.type.shape};
      if (!row.shape.empty()) row.shape.erase(row.shape.begin());
      const bool known = !v.type.shape.empty() && v.type.dtype != DType::kUndefined &&
                         std::all_of(row.shape.begin(), row.shape.end(),
                                     [](int64_t d) { return d >= 0; });
      if (!known) {
        m->row_types.clear();
        break;
      }
      m->row_types.push_back(std::move(row));
    }
    const size_t forms = EngineOptions::from_env().named_model_forms_per_tenant;
    if (static_cast<size_t>(m->config.max_batch_size) * m->devices.size() > forms) {
      for (int64_t b = 1; b < m->config.max_batch_size; b *= 2) m->padded_sizes.push_back(b);
      m->padded_sizes.push_back(m->config.max_batch_size);
    }
    m->warming = m->config.instances > 0 ? static_cast<int>(m->devices.size()) : 0;
    for (const std::string& d : m->devices)
      for (int i = 0; i < m->config.instances; ++i) {
        m->workers++;
        const Instance at =
            m->instances[static_cast<size_t>(i) < m->instances.size() ? static_cast<size_t>(i) : 0];
        m->threads.emplace_back([this, raw = m.get(), d, warm = i == 0, at] {
          if (warm) {
            warm_forms(*raw, d, at);
            std::lock_guard<std::mutex> lock(raw->mu);
            raw->warming--;
            raw->cv.notify_all();
          }
          worker(raw, d, at);
          raw->exited.fetch_add(1, std::memory_order_release);  // its last touch of *raw
        });
      }
  } else {
    m->config.dynamic_batching = false;  // each request runs alone, counted
    m->devices = m->config.devices;      // a list: requests take its devices in turn
  }
  models_.emplace(name, m);
  return m;
}

Result<std::vector<TensorHandle>> ModelRunner::run_alone(
    Model& m, SessionId session, ModelHandle model, const std::vector<TensorHandle>& inputs,
    const std::string& device, std::shared_ptr<CancelToken> call, int64_t rows) {
  if (rows < 0) {  // not looked at yet: the first input's rows (1 for a scalar)
    rows = 1;
    if (!inputs.empty())
      if (auto i = engine_->info(session, inputs[0], call.get()); i.ok() && !i->type.shape.empty())
        rows = std::max<int64_t>(i->type.shape[0], 1);
  }
  const auto t0 = Clock::now();
  auto out = engine_->run(session, model, inputs, false, call, device);
  Status s = out.status();
  if (out.ok())
    for (TensorHandle h : *out)
      if (Status w = engine_->wait(session, h, call.get()); !w.ok() && s.ok()) s = w;
  m.count_run(rows, micros(Clock::now() - t0));
  if (!s.ok() && out.ok() && call && !call->check().ok()) {
    for (TensorHandle h : *out) (void)engine_->release(session, h);
    return s;
  }
  return out;  // a node's error stays with its output, as Engine::run answers
}

Result<std::vector<TensorHandle>> ModelRunner::run(SessionId session, const std::string& tenant,
                                                   ModelHandle model,
                                                   const std::vector<TensorHandle>& inputs,
                                                   std::shared_ptr<CancelToken> call) {
  uint64_t serial = 0;
  const std::string name = engine_->named_model_of(session, model, &serial);
  if (name.empty()) return engine_->run(session, model, inputs, false, call);
  bool current = true;
  const std::shared_ptr<Model> held = model_for(name, serial, &current);  // kept while it runs
  Model& m = *held;
  auto finish = [&](Result<std::vector<TensorHandle>> r, int64_t queue_us) {
    bool ok = r.ok();
    if (ok)
      for (TensorHandle h : *r) ok = ok && engine_->wait(session, h, nullptr).ok();
    m.count_request(ok, queue_us);
    return r;
  };
  if (!m.config.dynamic_batching || m.config.max_batch_size < 1 || !current) {
    const std::string device =
        m.devices.size() > 1 ? m.devices[m.next_device++ % m.devices.size()] : std::string();
    return finish(run_alone(m, session, model, inputs, device, call, -1), 0);
  }

  auto r = std::make_shared<Request>();
  r->session = session;
  r->tenant = tenant;
  r->handle = model;
  r->inputs = inputs;
  r->call = call;
  // The inputs' values and shapes: batched only when every input has rows on axis 0, the
  // same number, and the model takes that many inputs (else it runs alone, and says why).
  bool batchable = inputs.size() == m.num_inputs && !inputs.empty();
  for (size_t i = 0; batchable && i < inputs.size(); ++i) {
    auto v = engine_->read(session, inputs[i], call.get());
    if (!v.ok()) {
      m.count_request(false, 0);
      return v.status().with_context(fmt::format("input {} of model '{}'", i, name));
    }
    const Shape& s = v->shape();
    if (s.empty() || (i > 0 && s[0] != r->rows)) batchable = false;
    if (!batchable) break;
    r->rows = s[0];
    r->signature += std::string(dtype_name(v->dtype())) + "[";
    for (size_t d = 1; d < s.size(); ++d) r->signature += std::to_string(s[d]) + ",";
    r->signature += "];";
    r->host.push_back(std::move(*v));
  }
  if (!batchable || r->rows < 1 || r->rows > m.config.max_batch_size)
    return finish(
        run_alone(m, session, model, inputs, m.devices[0], call, std::max<int64_t>(r->rows, 1)), 0);
  r->enqueued = Clock::now();
  {
    std::unique_lock<std::mutex> lock(m.mu);
    if (m.retired) {  // replaced since model_for: this one runs alone, on its own handle's model
      lock.unlock();
      return finish(run_alone(m, session, model, inputs, m.devices[0], call, r->rows), 0);
    }
    m.queues[tenant].push_back(r);
    m.queued++;
    m.cv.notify_all();
  }
  // Wait for the answer, giving up when the call does (then the request leaves the queue, or,
  // taken into a batch already, gets no outputs).
  std::unique_lock<std::mutex> lock(r->mu);
  while (!r->done) {
    r->cv.wait_for(lock, std::chrono::milliseconds(5));
    if (r->done || !call) continue;
    Status why = call->check();
    if (why.ok() && call->poll) why = call->poll();
    if (why.ok()) continue;
    call->cancel(why);
    r->work->cancel(why);
    r->abandoned = true;
    lock.unlock();
    {
      std::lock_guard<std::mutex> q(m.mu);
      auto it = m.queues.find(tenant);
      if (it != m.queues.end()) {
        auto& dq = it->second;
        auto at = std::find(dq.begin(), dq.end(), r);
        if (at != dq.end()) {
          dq.erase(at);
          m.queued--;
          if (dq.empty()) m.queues.erase(it);
        }
      }
    }
    m.count_request(false, micros(Clock::now() - r->enqueued));
    return why;
  }
  return finish(std::move(r->result), 0);
}

// Instances a batched model gets when its config names none: as many as its devices' queues
// have runners (a cpu device: batches side by side, each on its share of the cores; on 2
// cores two one-thread batches of MobileNetV2 ran 197 req/s where one two-thread batch at a
// time ran 165; a GPU's queue has one).
int ModelRunner::default_instances(const std::vector<std::string>& devices) const {
  int n = devices.empty() ? 1 : 64;
  for (const std::string& d : devices) n = std::min(n, engine_->queue_runners(d));
  return std::max(1, n);
}

void ModelRunner::unload_instances(Model& m) {
  for (const Instance& at : m.instances) (void)engine_->unload(at.session, at.handle);
}

// Each batch size is a compiled form of its own, and the first batch of a size used to compile
// it while every request waited: on the 2-core VM a MobileNetV2 form took 0.3-0.7 s under load,
// and new sizes kept appearing for minutes (p99 about 1 s against 75 ms at p50). So each
// device's first worker runs the model once at every size a batch can take (the padded sizes,
// or 1..max_batch_size) on zeros, before it serves; requests arriving meanwhile wait in the
// queue, as they would have for the compiles. As Triton's model warm-up. Skipped for a model
// whose inputs' shapes past the batch axis are not declared, and with TENSORD_BATCH_WARMUP=0.
void ModelRunner::warm_forms(Model& m, const std::string& device, Instance at) {
  if (m.row_types.size() != m.num_inputs || m.num_inputs == 0) return;
  if (const char* v = std::getenv("TENSORD_BATCH_WARMUP"); v && std::string(v) == "0") return;
  std::vector<int64_t> sizes = m.padded_sizes;
  if (sizes.empty())
    for (int64_t b = 1; b <= m.config.max_batch_size; ++b) sizes.push_back(b);
  for (int64_t b : sizes) {
    {
      std::lock_guard<std::mutex> lock(m.mu);
      if (stop_ || m.retired) return;
    }
    std::vector<TensorHandle> ins;
    Status s;
    for (const TensorType& row : m.row_types) {
      Shape shape = row.shape;
      shape.insert(shape.begin(), b);
      auto zeros = HostTensor::uninitialized(row.dtype, shape);
      if (!zeros.ok()) {
        s = zeros.status();
        break;
      }
      std::memset(zeros->mutable_data(), 0, zeros->nbytes());
      auto h = engine_->upload(at.session, zeros->view(), device);
      if (!h.ok()) {
        s = h.status();
        break;
      }
      ins.push_back(*h);
    }
    if (s.ok()) {
      auto outs = engine_->run(at.session, at.handle, ins, false, nullptr, device);
      if (outs.ok()) {
        for (TensorHandle h : *outs) {
          (void)engine_->wait(at.session, h);
          (void)engine_->release(at.session, h);
        }
      } else {
        s = outs.status();
      }
    }
    for (TensorHandle h : ins) (void)engine_->release(at.session, h);
    if (!s.ok()) {  // the requests will say what is wrong; warming stops here
      log::debug("batch warm-up stopped", {{"model", m.name},
                                           {"batch", b},
                                           {"why", s.to_string()}});
      return;
    }
  }
}

void ModelRunner::worker(Model* mp, std::string device, Instance at) {
  Model& m = *mp;
  const auto delay = std::chrono::microseconds(m.config.max_queue_delay_us);
  const int64_t max_rows = m.config.max_batch_size;
  const auto& preferred = m.config.preferred_batch_sizes;
  std::unique_lock<std::mutex> lock(m.mu);
  while (!stop_) {
    if (m.queued == 0) {
      if (m.retired) break;
      m.cv.wait_for(lock, std::chrono::milliseconds(100));
      continue;
    }
    // The oldest request decides the signature and the deadline.
    std::shared_ptr<Request> oldest;
    for (auto& [t, q] : m.queues)
      if (!q.empty() && (!oldest || q.front()->enqueued < oldest->enqueued)) oldest = q.front();
    int64_t rows = 0;
    for (auto& [t, q] : m.queues)
      for (auto& r : q)
        if (r->signature == oldest->signature) rows += r->rows;
    const auto deadline = oldest->enqueued + delay;
    const bool full = rows >= max_rows || (!preferred.empty() && rows >= preferred.back());
    if (!full && Clock::now() < deadline) {
      m.cv.wait_until(lock, deadline);
      continue;
    }
    int64_t cap = std::min(rows, max_rows);
    for (auto p = preferred.rbegin(); p != preferred.rend(); ++p)
      if (*p <= cap) {
        cap = *p;
        break;
      }
    // Fill round-robin over the tenants, from `next` on; the oldest goes first.
    std::vector<std::shared_ptr<Request>> batch;
    int64_t taken = 0;
    auto take = [&](std::deque<std::shared_ptr<Request>>& q,
                    std::deque<std::shared_ptr<Request>>::iterator at) {
      taken += (*at)->rows;
      batch.push_back(*at);
      q.erase(at);
      m.queued--;
    };
    {
      auto& q = m.queues[oldest->tenant];
      take(q, std::find(q.begin(), q.end(), oldest));
    }
    for (bool progress = true; progress && taken < cap;) {
      progress = false;
      auto start = m.queues.upper_bound(m.next);
      std::vector<std::string> order;
      for (auto it = start; it != m.queues.end(); ++it) order.push_back(it->first);
      for (auto it = m.queues.begin(); it != start; ++it) order.push_back(it->first);
      for (const std::string& t : order) {
        auto& q = m.queues[t];
        auto at = std::find_if(q.begin(), q.end(), [&](const std::shared_ptr<Request>& r) {
          return r->signature == oldest->signature && taken + r->rows <= cap;
        });
        if (at == q.end()) continue;
        take(q, at);
        m.next = t;
        progress = true;
        if (taken >= cap) break;
      }
    }
    for (auto it = m.queues.begin(); it != m.queues.end();)
      it = it->second.empty() ? m.queues.erase(it) : std::next(it);
    lock.unlock();
    run_batch(m, device, std::move(batch), at);
    lock.lock();
  }
  if (--m.workers == 0 && m.retired && !stop_) {
    lock.unlock();
    unload_instances(m);  // the replaced model goes with its last run
  }
}

void ModelRunner::run_batch(Model& m, const std::string& device,
                            std::vector<std::shared_ptr<Request>> batch, Instance at) {
  const auto start = Clock::now();
  auto deliver = [&](Request& r, Result<std::vector<TensorHandle>> result) {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.abandoned) {
      if (result.ok())
        for (TensorHandle h : *result) (void)engine_->release(r.session, h);
      return;
    }
    r.result = std::move(result);
    r.done = true;
    r.cv.notify_all();
  };
  for (auto& r : batch) m.count_queue(micros(start - r->enqueued));
  auto alone = [&](Request& r) {
    deliver(r, run_alone(m, r.session, r.handle, r.inputs, device, r.work, r.rows));
  };
  if (batch.size() == 1) {
    alone(*batch[0]);
    return;
  }
  int64_t rows = 0;
  for (auto& r : batch) rows += r->rows;
  int64_t padded = rows;
  for (int64_t b : m.padded_sizes)
    if (b >= rows) {
      padded = b;
      break;
    }
  // Concatenate each input along axis 0 and upload it to the runner's session.
  std::vector<TensorHandle> ins;
  Status s;
  for (size_t i = 0; s.ok() && i < m.num_inputs; ++i) {
    Shape shape = batch[0]->host[i].shape();
    shape[0] = padded;
    auto cat = HostTensor::uninitialized(batch[0]->host[i].dtype(), shape);
    if (!cat.ok()) {
      s = cat.status();
      break;
    }
    char* dst = static_cast<char*>(cat->mutable_data());
    for (auto& r : batch) {
      std::memcpy(dst, r->host[i].data(), r->host[i].nbytes());
      dst += r->host[i].nbytes();
    }
    const size_t filled = static_cast<size_t>(dst - static_cast<char*>(cat->mutable_data()));
    std::memset(dst, 0, cat->nbytes() - filled);  // padding rows
    auto h = engine_->upload(at.session, cat->view(), device);
    if (!h.ok())
      s = h.status();
    else
      ins.push_back(*h);
  }
  std::vector<TensorHandle> outs;
  std::vector<HostTensor> values;
  if (s.ok()) {
    auto o = engine_->run(at.session, at.handle, ins, false, nullptr, device);
    if (!o.ok())
      s = o.status();
    else
      outs = *o;
    for (size_t k = 0; s.ok() && k < outs.size(); ++k) {
      auto v = engine_->read(at.session, outs[k]);
      if (!v.ok())
        s = v.status();
      else if (v->shape().empty() || v->shape()[0] != padded)
        s = errors::FailedPrecondition("output {} has shape {} (not {} rows on axis 0)", k,
                                       v->type().to_string(), padded);
      else
        values.push_back(std::move(*v));
    }
  }
  for (TensorHandle h : ins) (void)engine_->release(at.session, h);
  for (TensorHandle h : outs) (void)engine_->release(at.session, h);
  if (!s.ok()) {
    // One of them may be bad: each runs alone, so only it fails.
    for (auto& r : batch) alone(*r);
    return;
  }
  m.count_run(rows, micros(Clock::now() - start));
  // Split the outputs back, each request's rows into its own session.
  int64_t row = 0;
  for (auto& r : batch) {
    std::vector<TensorHandle> mine;
    Status u;
    for (const HostTensor& v : values) {
      const size_t row_bytes = v.nbytes() / static_cast<size_t>(padded);
      Shape shape = v.shape();
      shape[0] = r->rows;
      TensorView piece{v.dtype(), shape,
                       static_cast<const char*>(v.data()) + row_bytes * static_cast<size_t>(row)};
      auto h = engine_->upload(r->session, piece, device);
      if (!h.ok()) {
        u = h.status();
        break;
      }
      mine.push_back(*h);
    }
    row += r->rows;
    if (!u.ok()) {
      for (TensorHandle h : mine) (void)engine_->release(r->session, h);
      deliver(*r, u.with_context("the output of a batched run"));
    } else {
      deliver(*r, std::move(mine));
    }
  }
}

std::vector<ModelCounters> ModelRunner::counters() const {
  std::vector<ModelCounters> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, st] : stats_) {
    std::lock_guard<std::mutex> l(st->mu);
    if (!st->counters.batch_size_counts.empty()) out.push_back(st->counters);
  }
  return out;
}

std::string ModelRunner::prometheus() const {
  const std::vector<ModelCounters> all = counters();
  if (all.empty()) return {};
  std::string text;
  auto labels = [](const ModelCounters& c) {
    auto esc = [](const std::string& s) {
      std::string o;
      for (char ch : s) {
        if (ch == '\\' || ch == '"') o += '\\';
        if (ch == '\n') {
          o += "\\n";
          continue;
        }
        o += ch;
      }
      return o;
    };
    return "model=\"" + esc(c.model) + "\",version=\"" + esc(c.version) + "\"";
  };
  auto family = [&](const char* name, const char* type, const char* help, auto value) {
    text += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    for (const ModelCounters& c : all)
      text += fmt::format("{}{{{}}} {}\n", name, labels(c), value(c));
  };
  family("tensord_model_requests_total", "counter", "Runs of the named model requested.",
         [](const ModelCounters& c) { return c.requests; });
  family("tensord_model_failures_total", "counter",
         "Requests of the named model that failed (or were cancelled).",
         [](const ModelCounters& c) { return c.failures; });
  family("tensord_model_queue_seconds_total", "counter",
         "Time requests waited for a batch to start, in all.",
         [](const ModelCounters& c) { return static_cast<double>(c.queue_us) * 1e-6; });
  family("tensord_model_compute_seconds_total", "counter",
         "Time the model's runs took (a batch counted once), in all.",
         [](const ModelCounters& c) { return static_cast<double>(c.compute_us) * 1e-6; });
  text +=
      "# HELP tensord_model_batch_size Rows per run of the named model (a batch, or a request "
      "run alone).\n# TYPE tensord_model_batch_size histogram\n";
  for (const ModelCounters& c : all) {
    int64_t cum = 0;
    for (size_t b = 0; b <= kBatchBuckets.size(); ++b) {
      cum += c.batch_size_counts[b];
      const std::string le = b < kBatchBuckets.size() ? std::to_string(kBatchBuckets[b]) : "+Inf";
      text +=
          fmt::format("tensord_model_batch_size_bucket{{{},le=\"{}\"}} {}\n", labels(c), le, cum);
    }
    text += fmt::format("tensord_model_batch_size_sum{{{}}} {}\n", labels(c), c.batch_rows);
    text += fmt::format("tensord_model_batch_size_count{{{}}} {}\n", labels(c), c.batches);
  }
  return text;
}

}  // namespace tensord::rpc
