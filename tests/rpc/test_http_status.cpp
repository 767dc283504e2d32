// Issue 17, metrics and status: `tensord serve --http` against real broker processes — the
// Prometheus exposition parsed and checked line by line (HELP and TYPE for every family,
// valid names and types, counters ending in _total, histograms cumulative) and its counters
// moving once work is done; /healthz and /readyz; the token and the loopback rule; `tensord
// status`; and the status page rendered by headless Chromium, with a screenshot kept in the
// build folder (skipped with a message when Chromium cannot run here, failed under CI=true).
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "broker_process.h"
#include "rpc/remote_client.h"
#include "tensord/graph.h"
#include "tensord/tensor.h"

namespace tensord {
namespace {

using std::chrono::milliseconds;
using testing::BrokerOptions;
using testing::BrokerProcess;

// A broker with --http on a free loopback port, and its HTTP URL.
struct HttpBroker {
  std::unique_ptr<BrokerProcess> broker;
  std::string url;   // "http://127.0.0.1:PORT"
  std::string host;  // "127.0.0.1"
  int port = 0;
};

Result<HttpBroker> start_http_broker(std::vector<std::string> extra = {}) {
  BrokerOptions o;
  o.args = {"--http", "0"};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  auto b = BrokerProcess::start(o);
  if (!b.ok()) return b.status();
  auto http = (*b)->next_http_address(milliseconds(10000));
  if (!http.ok()) return http.status();
  HttpBroker h;
  h.url = http->url;
  h.host = http->host;
  h.port = http->port;
  h.broker = std::move(b).value();
  return h;
}

httplib::Result get(const HttpBroker& b, const std::string& path,
                    const httplib::Headers& headers = {}) {
  httplib::Client c(b.host, b.port);
  c.set_connection_timeout(5);
  c.set_read_timeout(10);
  return c.Get(path, headers);
}

Node node(std::string name, std::string op, std::vector<std::string> in,
          std::vector<std::string> out) {
  Node n;
  n.name = std::move(name);
  n.op = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// y = x + x on `device`: one graph, one node.
Graph add_graph() {
  Graph g;
  g.name = "twice";
  g.inputs = {{"x", {DType::kFloat32, {-1}}}};
  g.outputs = {{"y", {}}};
  g.nodes = {node("add", "Add", {"x", "x"}, {"y"})};
  return g;
}

// Some work through a real client: uploads, graphs on cpu:0 and cpu:1, reads, a copy
// between devices, and one call that fails (NOT_FOUND).
void do_work(const std::string& address, int rounds) {
  auto c = rpc::RemoteClient::connect(address);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const Graph g = add_graph();
  for (int i = 0; i < rounds; ++i) {
    HostTensor t = HostTensor::from_vector<float>(std::vector<float>(4096, 1.0f + i), {4096});
    auto h = (*c)->upload(t.view(), "cpu:0");
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    auto out = (*c)->execute(g, {*h}, i % 2 ? "cpu:1" : "cpu:0");
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto back = (*c)->read((*out)[0]);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->to_double_vector()[0], 2.0 * (1.0 + i));
    ASSERT_TRUE((*c)->release(*h).ok());
  }
  EXPECT_FALSE((*c)->read(987654321).ok());  // an unknown handle: an error to count
}

// ---------------------------------------------------------------- the exposition parser

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct Family {
  std::string help, type;
  std::vector<Sample> samples;
};

// Parses the Prometheus text format 0.0.4 strictly into `out`; every violation is a test
// failure.
void parse_exposition_into(const std::string& text, std::map<std::string, Family>* out) {
  static const std::regex metric_name("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex label_name("[a-zA-Z_][a-zA-Z0-9_]*");
  std::map<std::string, Family> families;
  std::set<std::string> series;
  std::string current;  // the family whose samples may follow
  std::set<std::string> closed;
  EXPECT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "the exposition must end with a newline";
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string where = "line " + std::to_string(n) + ": '" + line + "'";
    EXPECT_FALSE(line.empty()) << where;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream ls(line);
      std::string hash, kind, name;
      ls >> hash >> kind >> name;
      if (kind != "HELP" && kind != "TYPE") continue;  // a plain comment
      EXPECT_TRUE(std::regex_match(name, metric_name)) << where;
      EXPECT_EQ(name.rfind("tensord_", 0), 0u) << "not tensord_-prefixed: " << where;
      EXPECT_EQ(closed.count(name), 0u) << "family declared twice or not contiguous: " << where;
      if (!current.empty() && current != name) closed.insert(current);
      current = name;
      Family& f = families[name];
      std::string rest;
      std::getline(ls, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kind == "HELP") {
        EXPECT_TRUE(f.help.empty()) << "second HELP: " << where;
        EXPECT_FALSE(rest.empty()) << "empty HELP: " << where;
        f.help = rest;
      } else {
        EXPECT_TRUE(f.type.empty()) << "second TYPE: " << where;
        EXPECT_TRUE(f.samples.empty()) << "TYPE after samples: " << where;
        static const std::set<std::string> types = {"counter", "gauge", "histogram", "summary",
                                                    "untyped"};
        EXPECT_EQ(types.count(rest), 1u) << "bad type: " << where;
        f.type = rest;
        if (rest == "counter")
          EXPECT_TRUE(name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0)
              << "a counter's name must end in _total: " << where;
        else
          EXPECT_FALSE(name.size() > 6 && name.compare(name.size() - 6, 6, "_total") == 0)
              << "only counters end in _total: " << where;
      }
      continue;
    }
    // name{label="value",...} value
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    EXPECT_TRUE(std::regex_match(s.name, metric_name)) << where;
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        ASSERT_NE(eq, std::string::npos) << where;
        const std::string key = line.substr(i, eq - i);
        EXPECT_TRUE(std::regex_match(key, label_name)) << where;
        EXPECT_EQ(key.rfind("__", 0), std::string::npos) << "reserved label name: " << where;
        ASSERT_LT(eq + 1, line.size()) << where;
        EXPECT_EQ(line[eq + 1], '"') << where;
        std::string value;
        size_t j = eq + 2;
        for (; j < line.size() && line[j] != '"'; ++j) {
          if (line[j] == '\\') {
            ++j;
            ASSERT_LT(j, line.size()) << where;
            EXPECT_TRUE(line[j] == '\\' || line[j] == '"' || line[j] == 'n') << "bad escape: " << where;
            value += line[j] == 'n' ? '\n' : line[j];
          } else {
            value += line[j];
          }
        }
        ASSERT_LT(j, line.size()) << "unterminated label value: " << where;
        EXPECT_EQ(s.labels.count(key), 0u) << "label repeated: " << where;
        s.labels[key] = value;
        i = j + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ASSERT_LT(i, line.size()) << where;
      ++i;  // '}'
    }
    ASSERT_LT(i, line.size()) << where;
    EXPECT_EQ(line[i], ' ') << where;
    const std::string value = line.substr(i + 1);
    if (value == "+Inf") s.value = INFINITY;
    else if (value == "-Inf") s.value = -INFINITY;
    else if (value == "NaN") s.value = NAN;
    else {
      size_t used = 0;
      EXPECT_NO_THROW(s.value = std::stod(value, &used)) << where;
      EXPECT_EQ(used, value.size()) << "trailing text after the value (a timestamp?): " << where;
    }
    // Which family: the name itself, or a histogram's/summary's _bucket/_sum/_count.
    std::string family = s.name;
    if (!families.count(family) || families[family].type.empty()) {
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string suf = suffix;
        if (s.name.size() > suf.size() &&
            s.name.compare(s.name.size() - suf.size(), suf.size(), suf) == 0) {
          const std::string base = s.name.substr(0, s.name.size() - suf.size());
          if (families.count(base) &&
              (families[base].type == "histogram" || families[base].type == "summary"))
            family = base;
        }
      }
    }
    EXPECT_EQ(family, current) << "a sample outside its family's block (no HELP/TYPE before it?): "
                               << where;
    ASSERT_EQ(families.count(family), 1u) << "no HELP/TYPE for " << where;
    Family& f = families[family];
    EXPECT_FALSE(f.help.empty()) << "no HELP for " << where;
    EXPECT_FALSE(f.type.empty()) << "no TYPE for " << where;
    if (f.type == "counter") EXPECT_GE(s.value, 0) << "a negative counter: " << where;
    std::string key = s.name;
    for (const auto& [k, v] : s.labels) key += "|" + k + "=" + v;
    EXPECT_TRUE(series.insert(key).second) << "series repeated: " << where;
    f.samples.push_back(std::move(s));
  }
  for (const auto& [name, f] : families) {
    EXPECT_FALSE(f.help.empty()) << name << " has no HELP";
    EXPECT_FALSE(f.type.empty()) << name << " has no TYPE";
    if (f.type != "histogram") continue;
    // Per label set (without le): buckets cumulative, ending with +Inf == _count.
    std::map<std::string, std::vector<std::pair<double, double>>> buckets;
    std::map<std::string, double> counts;
    for (const auto& s : f.samples) {
      std::string key;
      for (const auto& [k, v] : s.labels)
        if (k != "le") key += k + "=" + v + ",";
      if (s.name == name + "_bucket") {
        EXPECT_EQ(s.labels.count("le"), 1u) << name << " bucket without le";
        const std::string le = s.labels.count("le") ? s.labels.at("le") : "";
        buckets[key].push_back({le == "+Inf" ? INFINITY : std::stod(le), s.value});
      } else if (s.name == name + "_count") {
        counts[key] = s.value;
      }
    }
    for (const auto& [key, bs] : buckets) {
      ASSERT_FALSE(bs.empty());
      EXPECT_TRUE(std::isinf(bs.back().first)) << name << "{" << key << "} lacks le=\"+Inf\"";
      for (size_t i = 1; i < bs.size(); ++i) {
        EXPECT_LT(bs[i - 1].first, bs[i].first) << name << "{" << key << "} bounds not increasing";
        EXPECT_LE(bs[i - 1].second, bs[i].second) << name << "{" << key << "} not cumulative";
      }
      EXPECT_EQ(counts.count(key), 1u) << name << "{" << key << "} has no _count";
      if (counts.count(key)) EXPECT_EQ(bs.back().second, counts[key]) << name << "{" << key << "}";
    }
  }
  *out = std::move(families);
}

std::map<std::string, Family> parse_exposition(const std::string& text) {
  std::map<std::string, Family> out;
  parse_exposition_into(text, &out);
  return out;
}

// The value of the series `name` with exactly these labels (among others when `partial`), or
// -1 when absent.
double value_of(const std::map<std::string, Family>& fams, const std::string& family,
                const std::string& name, const std::map<std::string, std::string>& labels) {
  auto it = fams.find(family);
  if (it == fams.end()) return -1;
  for (const auto& s : it->second.samples) {
    if (s.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels)
      if (!s.labels.count(k) || s.labels.at(k) != v) match = false;
    if (match) return s.value;
  }
  return -1;
}
double value_of(const std::map<std::string, Family>& fams, const std::string& name,
                const std::map<std::string, std::string>& labels = {}) {
  return value_of(fams, name, name, labels);
}

// ---------------------------------------------------------------- tests

TEST(HttpStatus, MetricsParseAsPrometheusAndMoveWithWork) {
  auto b = start_http_broker();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto before_res = get(*b, "/metrics");
  ASSERT_TRUE(before_res) << httplib::to_string(before_res.error());
  ASSERT_EQ(before_res->status, 200);
  EXPECT_EQ(before_res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  const auto before = parse_exposition(before_res->body);
  for (const char* family :
       {"tensord_device_memory_used_bytes", "tensord_device_memory_reserved_bytes",
        "tensord_device_memory_total_bytes", "tensord_device_tensors",
        "tensord_executables_cached", "tensord_executable_cache_hits_total",
        "tensord_executable_compiles_total", "tensord_device_graphs_executed_total",
        "tensord_device_ops_executed_total", "tensord_bytes_moved_total",
        "tensord_cpu_fallback_nodes_total", "tensord_rpc_requests_total",
        "tensord_rpc_duration_seconds", "tensord_sessions_open", "tensord_device_queue_depth",
        "tensord_device_queue_wait_seconds_total", "tensord_rpc_errors_total"})
    EXPECT_EQ(before.count(family), 1u) << family << " missing";
  EXPECT_GT(value_of(before, "tensord_device_memory_total_bytes", {{"device", "cpu:1"}, {"kind", "cpu"}}), 0);
  EXPECT_EQ(value_of(before, "tensord_sessions_open"), 0);

  do_work(b->broker->address(), 6);

  auto after_res = get(*b, "/metrics");
  ASSERT_TRUE(after_res);
  const auto after = parse_exposition(after_res->body);
  const auto graphs = [&](const std::map<std::string, Family>& f, const char* dev) {
    return value_of(f, "tensord_device_graphs_executed_total", {{"device", dev}, {"kind", "cpu"}});
  };
  EXPECT_EQ(graphs(after, "cpu:0") - std::max(0.0, graphs(before, "cpu:0")), 3);
  EXPECT_EQ(graphs(after, "cpu:1") - std::max(0.0, graphs(before, "cpu:1")), 3);
  EXPECT_GE(value_of(after, "tensord_device_ops_executed_total", {{"device", "cpu:1"}}), 3);
  EXPECT_EQ(value_of(after, "tensord_rpc_requests_total", {{"method", "Execute"}, {"code", "OK"}}), 6);
  EXPECT_GE(value_of(after, "tensord_rpc_requests_total", {{"method", "OpenSession"}, {"code", "OK"}}), 1);
  EXPECT_GE(value_of(after, "tensord_rpc_errors_total", {{"code", "NOT_FOUND"}}), 1);
  EXPECT_EQ(value_of(after, "tensord_rpc_duration_seconds", "tensord_rpc_duration_seconds_count",
                     {{"method", "Execute"}}),
            6);
  EXPECT_GT(value_of(after, "tensord_rpc_duration_seconds", "tensord_rpc_duration_seconds_sum",
                     {{"method", "Execute"}}),
            0);
  EXPECT_GE(value_of(after, "tensord_executable_compiles_total") +
                value_of(after, "tensord_executable_cache_hits_total"),
            6);
  EXPECT_GE(value_of(after, "tensord_executables_cached"), 1);
  // cpu:1 computed on values uploaded to cpu:0: copied between devices.
  EXPECT_GT(value_of(after, "tensord_device_queue_tasks_total", {{"device", "cpu:1"}}), 0);
  double moved = 0;
  for (const auto& s : after.at("tensord_bytes_moved_total").samples) moved += s.value;
  EXPECT_GT(moved, 0) << "no bytes counted on any path";
}

TEST(HttpStatus, HealthzReadyzAndUnknownPaths) {
  auto b = start_http_broker();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  auto h = get(*b, "/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(h->body, "ok\n");
  auto r = get(*b, "/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto nf = get(*b, "/nope");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_NE(nf->body.find("/metrics"), std::string::npos) << nf->body;
  auto bad = get(*b, "/api/status?history=lots");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  auto st = get(*b, "/api/status?history=5");
  ASSERT_TRUE(st);
  ASSERT_EQ(st->status, 200);
  auto j = nlohmann::json::parse(st->body);
  EXPECT_EQ(j["ready"], true);
  EXPECT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["devices"][0]["name"], "cpu:0");
  // Stopping: SIGTERM ends the process cleanly with its HTTP listener.
  b->broker->signal(SIGTERM);
  EXPECT_EQ(b->broker->wait_exit(milliseconds(15000)), 0);
  EXPECT_FALSE(get(*b, "/healthz"));
}

TEST(HttpStatus, TokenGuardsEverythingButHealth) {
  std::string dir = (std::filesystem::temp_directory_path() / "tensord-http.XXXXXX").string();
  ASSERT_TRUE(mkdtemp(dir.data()));
  const std::string tokens = dir + "/tokens";
  std::ofstream(tokens) << "alice:s3cret-token\n";
  chmod(tokens.c_str(), 0600);
  auto b = start_http_broker({"--token-file", tokens});
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  for (const char* path : {"/metrics", "/api/status", "/"}) {
    auto none = get(*b, path);
    ASSERT_TRUE(none);
    EXPECT_EQ(none->status, 401) << path;
    EXPECT_NE(none->get_header_value("WWW-Authenticate").find("Basic"), std::string::npos);
    auto wrong = get(*b, path, {{"Authorization", "Bearer not-it"}});
    ASSERT_TRUE(wrong);
    EXPECT_EQ(wrong->status, 401) << path;
    auto good = get(*b, path, {{"Authorization", "Bearer s3cret-token"}});
    ASSERT_TRUE(good);
    EXPECT_EQ(good->status, 200) << path;
    // What a browser sends after asking: Basic with the token as the password.
    httplib::Client c(b->host, b->port);
    c.set_basic_auth("anyone", "s3cret-token");
    auto basic = c.Get(path);
    ASSERT_TRUE(basic);
    EXPECT_EQ(basic->status, 200) << path;
    c.set_basic_auth("anyone", "wrong");
    auto basic_wrong = c.Get(path);
    ASSERT_TRUE(basic_wrong);
    EXPECT_EQ(basic_wrong->status, 401) << path;
  }
  auto h = get(*b, "/healthz");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  // BrokerStatus over gRPC: the same token.
  rpc::RemoteClientOptions o;
  auto refused = rpc::broker_status(b->broker->address(), o);
  EXPECT_EQ(refused.status().code(), StatusCode::kUnauthenticated) << refused.status().to_string();
  o.token = "s3cret-token";
  auto ok = rpc::broker_status(b->broker->address(), o);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(nlohmann::json::parse(*ok)["devices"].size(), 2u);
}

TEST(HttpStatus, NonLoopbackHttpWithoutTokenIsRefused) {
  BrokerOptions o;
  o.args = {"--http", "0.0.0.0:0"};
  auto b = BrokerProcess::start(o);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("status 2"), std::string::npos) << b.status().to_string();
}

// Runs `command`, returns its stdout and exit status.
std::pair<std::string, int> run(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return {"", -1};
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  return {out, WIFEXITED(st) ? WEXITSTATUS(st) : -1};
}

TEST(HttpStatus, StatusCommandShowsDevicesSessionsAndCalls) {
  auto b = BrokerProcess::start();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  do_work((*b)->address(), 2);
  auto client = rpc::RemoteClient::connect((*b)->address());  // one session open meanwhile
  ASSERT_TRUE(client.ok());
  const std::string cli = std::string(TENSORD_CLI_PATH) + " status --address " + (*b)->address();
  auto [text, rc] = run(cli + " 2>&1");
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("| cpu:0"), std::string::npos) << text;
  EXPECT_NE(text.find("| cpu:1"), std::string::npos) << text;
  EXPECT_NE(text.find("Sessions: 1"), std::string::npos) << text;
  EXPECT_NE(text.find("Execute"), std::string::npos) << text;
  EXPECT_NE(text.find("NOT_FOUND"), std::string::npos) << "the failed read is a recent error\n" << text;
  auto [json_text, rc2] = run(cli + " --json");
  EXPECT_EQ(rc2, 0);
  auto j = nlohmann::json::parse(json_text, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json_text;
  EXPECT_EQ(j["sessions"]["open"], 1);
  EXPECT_GE(j["totals"]["graphs"].get<int64_t>(), 2);
  auto [watched, rc3] = run(cli + " --watch --count 2 --interval 0.2");
  EXPECT_EQ(rc3, 0);
  size_t screens = 0;
  for (size_t at = watched.find("| Device"); at != std::string::npos;
       at = watched.find("| Device", at + 1))
    ++screens;
  EXPECT_EQ(screens, 2u) << watched;
  auto [missing, rc4] = run(std::string("env -u TENSORD_ADDRESS ") + TENSORD_CLI_PATH + " status 2>&1");
  EXPECT_EQ(rc4, 2) << missing;
  EXPECT_NE(missing.find("--address"), std::string::npos) << missing;
}

// With --tls-cert/--tls-key the endpoints are HTTPS with the same certificate; plain HTTP
// gets nothing.
TEST(HttpStatus, TlsServesHttpsWithTheBrokersCertificate) {
  std::string dir = (std::filesystem::temp_directory_path() / "tensord-https.XXXXXX").string();
  ASSERT_TRUE(mkdtemp(dir.data()));
  auto [gen, rc] = run("openssl req -x509 -newkey rsa:2048 -nodes -keyout " + dir +
                       "/key.pem -out " + dir + "/cert.pem -days 1 -subj /CN=localhost "
                       "-addext subjectAltName=IP:127.0.0.1,DNS:localhost 2>&1");
  if (rc != 0) {
    std::filesystem::remove_all(dir);
    GTEST_SKIP() << "cannot make a certificate with openssl: " << gen;
  }
  auto b = start_http_broker({"--tls-cert", dir + "/cert.pem", "--tls-key", dir + "/key.pem"});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->url.rfind("https://", 0), 0u) << b->url;
  httplib::SSLClient c(b->host, b->port);
  c.set_ca_cert_path((dir + "/cert.pem").c_str());
  c.enable_server_certificate_verification(true);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m) << httplib::to_string(m.error());
  EXPECT_EQ(m->status, 200);
  EXPECT_FALSE(parse_exposition(m->body).empty());
  auto plain = get(*b, "/healthz");
  EXPECT_TRUE(!plain || plain->status != 200) << "plain HTTP answered on the HTTPS port";
  std::filesystem::remove_all(dir);
}

// Headless Chromium, or "" with why it cannot run.
std::string find_chromium(std::string* why) {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (access(c, X_OK) == 0) return c;
  *why = "no Chromium (/usr/bin/chromium): apt-get install chromium (scripts/setup.sh)";
  return "";
}

TEST(HttpStatus, PageRendersDevicesAndChartsInHeadlessChromium) {
  std::string why;
  const std::string chromium = find_chromium(&why);
  const char* ci = std::getenv("CI");
  const bool must = ci && std::string(ci) == "true";
  if (chromium.empty()) {
    if (must) FAIL() << why << " (CI=true: the status page must be checked)";
    GTEST_SKIP() << why;
  }
  auto b = start_http_broker();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  // Work in the background while the page is loaded: the charts have something to show.
  std::atomic<bool> stop{false};
  std::thread worker([&] {
    auto c = rpc::RemoteClient::connect(b->broker->address());
    if (!c.ok()) return;
    const Graph g = add_graph();
    HostTensor t = HostTensor::from_vector<float>(std::vector<float>(1 << 16, 1.0f), {1 << 16});
    while (!stop) {
      auto h = (*c)->upload(t.view(), "cpu:0");
      if (!h.ok()) break;
      auto out = (*c)->execute(g, {*h}, "cpu:1");
      if (out.ok()) {
        (void)(*c)->read((*out)[0]);
        (void)(*c)->release((*out)[0]);
      }
      (void)(*c)->release(*h);
      std::this_thread::sleep_for(milliseconds(5));
    }
  });
  struct Join {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop = true;
      t.join();
    }
  } join{stop, worker};
  // Samples are taken once a second: wait for two with work in them.
  for (int i = 0; i < 100; ++i) {
    auto st = get(*b, "/api/status?history=60");
    if (st && st->status == 200) {
      auto j = nlohmann::json::parse(st->body, nullptr, false);
      if (!j.is_discarded() && j["samples"]["t"].size() >= 2 && j["totals"]["graphs"].get<int64_t>() > 0)
        break;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  std::string profile = (std::filesystem::temp_directory_path() / "tensord-chromium.XXXXXX").string();
  ASSERT_TRUE(mkdtemp(profile.data()));
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
      "--disable-extensions --disable-background-networking --hide-scrollbars "
      "--user-data-dir=" + profile + " --virtual-time-budget=4000 --window-size=1280,1500 ";
  const std::string env = "HOME=" + profile + " ";
  auto [dom, rc] = run(env + "timeout 25 " + chromium + flags + "--dump-dom " + b->url + "/ 2>/dev/null");
  if (rc != 0 || dom.find("<html") == std::string::npos) {
    std::filesystem::remove_all(profile);
    if (must) FAIL() << "Chromium could not load the page (exit " << rc << ")";
    GTEST_SKIP() << "Chromium cannot run here (exit " << rc << "); CI=true makes this a failure";
  }
  EXPECT_NE(dom.find("data-device=\"cpu:0\""), std::string::npos) << dom.substr(0, 4000);
  EXPECT_NE(dom.find("data-device=\"cpu:1\""), std::string::npos);
  std::smatch m;
  const std::regex samples("id=\"chart-throughput\"[^>]*data-samples=\"([0-9]+)\"");
  ASSERT_TRUE(std::regex_search(dom, m, samples)) << "no throughput chart in the DOM";
  EXPECT_GT(std::stoi(m[1]), 0) << "the throughput chart drew no samples";
  const std::regex rendered("data-rendered=\"([0-9]+)\"");
  ASSERT_TRUE(std::regex_search(dom, m, rendered));
  EXPECT_GE(std::stoi(m[1]), 1) << "the page's script did not render";
  const std::regex err("id=\"err\">([^<]*)<");
  ASSERT_TRUE(std::regex_search(dom, m, err));
  EXPECT_EQ(m[1].str(), "") << "the page could not refresh from /api/status";
  // The screenshot, kept in the build folder (the README's image is made from it).
  const std::string png = std::string(TENSORD_BUILD_DIR) + "/status_page.png";
  std::filesystem::remove(png);
  auto [shot, rc2] = run(env + "timeout 25 " + chromium + flags + "--screenshot=" + png + " " +
                         b->url + "/ 2>/dev/null");
  std::filesystem::remove_all(profile);
  EXPECT_EQ(rc2, 0);
  ASSERT_TRUE(std::filesystem::exists(png)) << "no screenshot at " << png;
  EXPECT_GT(std::filesystem::file_size(png), 10000u) << "a suspiciously small screenshot";
}

}  // namespace
}  // namespace tensord

namespace tensord {
namespace {

// Issue 29's fixes, in headless Chromium at 1400 px against a broker with tokens and named
// models: the page refreshes with the token in its URL (http://tenant:TOKEN@host/: fetch()
// refuses such URLs, so the page strips them and sends an Authorization header); the named
// models are listed with their state (ready / unavailable with the reason) on the page, in
// /api/status and in `tensord status`; a session's normal end (its Attach ends CANCELLED) is
// no error; no section overflows; the busy axis has distinct ticks under low load.
TEST(HttpStatus, PageWithTokenInUrlListsModelsWithoutOverflow) {
  std::string why;
  const std::string chromium = find_chromium(&why);
  const char* ci = std::getenv("CI");
  const bool must = ci && std::string(ci) == "true";
  if (access("/usr/bin/python3", X_OK) != 0 ||
      std::system("/usr/bin/python3 -c 'import onnx, numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "/usr/bin/python3 with onnx and numpy is needed to write the test models";
  std::string dir = (std::filesystem::temp_directory_path() / "tensord-page.XXXXXX").string();
  ASSERT_TRUE(mkdtemp(dir.data()));
  struct Rm {
    std::string d;
    ~Rm() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } rm{dir};
  ASSERT_EQ(std::system(("/usr/bin/python3 " TENSORD_RPC_TEST_DIR "/make_named_models.py " + dir +
                         "/models --small")
                            .c_str()),
            0);
  const std::string tokens = dir + "/tokens";
  std::ofstream(tokens) << "alice:s3cret-token\n";
  chmod(tokens.c_str(), 0600);
  auto b = start_http_broker({"--token-file", tokens, "--models", dir + "/models"});
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const httplib::Headers auth = {{"Authorization", "Bearer s3cret-token"}};

  // Sessions that open, work and close: each one's Attach ends CANCELLED, which is no error.
  for (int i = 0; i < 3; ++i) {
    rpc::RemoteClientOptions o;
    o.token = "s3cret-token";
    auto c = rpc::RemoteClient::connect(b->broker->address(), o);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    HostTensor t = HostTensor::from_vector<float>({1, 2, 3, 4}, {4});
    auto h = (*c)->upload(t.view(), "cpu:0");
    ASSERT_TRUE(h.ok());
    auto out = (*c)->execute(add_graph(), {*h}, "cpu:0");
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE((*c)->read((*out)[0]).ok());
  }
  nlohmann::json st;
  for (int i = 0; i < 100; ++i) {  // until the Attach calls have ended and a sample is taken
    auto r = get(*b, "/api/status?history=60", auth);
    ASSERT_TRUE(r && r->status == 200);
    st = nlohmann::json::parse(r->body);
    int64_t attach = 0;
    for (const auto& m : st["methods"])
      if (m["name"] == "Attach") attach = m["count"].get<int64_t>();
    if (attach >= 3 && st["samples"]["t"].size() >= 2) break;
    std::this_thread::sleep_for(milliseconds(100));
  }
  for (const auto& m : st["methods"]) {
    if (m["name"] == "Attach") EXPECT_GE(m["count"].get<int64_t>(), 3) << m.dump();
    EXPECT_EQ(m["errors"].get<int64_t>(), 0) << m.dump();
  }
  EXPECT_EQ(st["totals"]["rpc_errors"].get<int64_t>(), 0) << st["totals"].dump();
  EXPECT_TRUE(st["recent_errors"].empty()) << st["recent_errors"].dump();
  EXPECT_TRUE(st["errors_by_code"].empty()) << st["errors_by_code"].dump();
  // Models in /api/status: state, device, inputs with dtypes and shapes; the reason.
  std::map<std::string, nlohmann::json> models;
  for (const auto& m : st["models"]) models[m["name"].get<std::string>()] = m;
  ASSERT_EQ(models.size(), 3u) << st["models"].dump();
  EXPECT_EQ(models["mlp"]["state"], "ready");
  EXPECT_EQ(models["mlp"]["inputs"][0]["dtype"], "float32");
  EXPECT_EQ(models["mlp"]["inputs"][0]["shape"], nlohmann::json({-1, 1024}));
  EXPECT_EQ(models["add"]["device"], "cpu:1");
  EXPECT_EQ(models["broken"]["state"], "unavailable");
  EXPECT_FALSE(models["broken"]["reason"].get<std::string>().empty());
  // /metrics: the ended sessions are not errors there either.
  auto metrics = get(*b, "/metrics", auth);
  ASSERT_TRUE(metrics && metrics->status == 200);
  EXPECT_EQ(metrics->body.find("tensord_rpc_errors_total{code=\"CANCELLED\"}"), std::string::npos)
      << metrics->body;
  // `tensord status`: the models with their state.
  auto [text, rc] = run("TENSORD_TOKEN=s3cret-token " + std::string(TENSORD_CLI_PATH) +
                        " status --address " + b->broker->address() + " 2>&1");
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("Models:"), std::string::npos) << text;
  EXPECT_NE(text.find("X float32[?,1024]"), std::string::npos) << text;
  EXPECT_NE(text.find("unavailable"), std::string::npos) << text;

  if (chromium.empty()) {
    if (must) FAIL() << why << " (CI=true: the status page must be checked)";
    GTEST_SKIP() << why;
  }
  std::string profile = dir + "/chromium";
  ASSERT_TRUE(std::filesystem::create_directory(profile));
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
      "--disable-extensions --disable-background-networking --hide-scrollbars "
      "--user-data-dir=" +
      profile + " --virtual-time-budget=5000 --window-size=1400,1800 ";
  const std::string env = "HOME=" + profile + " ";
  const std::string url =
      "http://alice:s3cret-token@" + b->host + ":" + std::to_string(b->port) + "/";
  auto [dom, rc1] =
      run(env + "timeout 25 " + chromium + flags + "--dump-dom " + url + " 2>/dev/null");
  if (rc1 != 0 || dom.find("<html") == std::string::npos) {
    if (must) FAIL() << "Chromium could not load the page (exit " << rc1 << ")";
    GTEST_SKIP() << "Chromium cannot run here (exit " << rc1 << "); CI=true makes this a failure";
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(dom, m, std::regex("id=\"err\">([^<]*)<")));
  EXPECT_EQ(m[1].str(), "") << "the page could not refresh with the token in its URL";
  ASSERT_TRUE(std::regex_search(dom, m, std::regex("data-rendered=\"([0-9]+)\"")));
  EXPECT_GE(std::stoi(m[1]), 2) << "the page rendered its first data only, no refresh";
  EXPECT_NE(dom.find("data-model=\"mlp\" data-state=\"ready\""), std::string::npos)
      << dom.substr(0, 6000);
  EXPECT_NE(dom.find("data-model=\"broken\" data-state=\"unavailable\""), std::string::npos);
  // No section wider than its content at 1400 px (the calls table overflowed).
  const std::regex overflow("<section[^>]*data-overflow=\"([01])\"");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), overflow);
       it != std::sregex_iterator(); ++it)
    EXPECT_EQ((*it)[1].str(), "0") << (*it)[0].str();
  EXPECT_NE(dom.find("id=\"methods-section\" data-overflow=\"0\""), std::string::npos);
  // The busy axis under (next to) no load: five distinct ticks.
  ASSERT_TRUE(
      std::regex_search(dom, m, std::regex("id=\"chart-busy\"[^>]*data-ticks=\"([^\"]*)\"")))
      << "no ticks on the busy chart";
  std::set<std::string> ticks;
  std::stringstream ss(m[1].str());
  for (std::string t; std::getline(ss, t, '|');) ticks.insert(t);
  EXPECT_EQ(ticks.size(), 5u) << "busy ticks: " << m[1].str();
  const std::string png = std::string(TENSORD_BUILD_DIR) + "/status_page_models.png";
  std::filesystem::remove(png);
  auto [shot, rc2] = run(env + "timeout 25 " + chromium + flags + "--screenshot=" + png + " " +
                         url + " 2>/dev/null");
  EXPECT_EQ(rc2, 0);
  EXPECT_TRUE(std::filesystem::exists(png)) << "no screenshot at " << png;
}

}  // namespace
}  // namespace tensord
