// The run channel (OpenRunChannel): RunModel and Execute from a same-host client on a socket
// pair of its session's own, without gRPC. Against real `tensord serve` processes:
//   - a client on this host uses it by itself, and its answers equal gRPC's bit for bit, errors
//     included; its calls are counted as the gRPC ones are (BrokerStatus methods, recent errors);
//   - raw, as a hostile client would use it: bytes that are not a request, a request naming no
//     call, a message over the limit, another session's handles, a ticket spent twice, more
//     channels than a session may open: each a clear answer, and the broker serves on;
//   - a channel ends with its session.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "broker_process.h"
#include "rpc/region_channel.h"
#include "rpc/remote_client.h"
#include "rpc/wire.h"
#include "shm_util.h"
#include "tensord.grpc.pb.h"
#include "tensord/graph.h"
#include "tensord/tensor.h"

namespace tensord {
namespace {

using std::chrono::milliseconds;
using testing::BrokerProcess;

// y = x * 3 + 1, z = -x: two outputs, so answers carry more than one value.
Graph affine_graph(int64_t n) {
  Graph g;
  g.name = "affine";
  g.inputs = {{"x", {DType::kFloat32, {n}}}};
  g.initializers.emplace("three", HostTensor::from_vector<float>({3.0f}, {1}));
  g.initializers.emplace("one", HostTensor::from_vector<float>({1.0f}, {1}));
  auto node = [](const char* op, std::vector<std::string> in, const char* out) {
    Node n;
    n.name = out;
    n.op = op;
    n.inputs = std::move(in);
    n.outputs = {out};
    return n;
  };
  g.nodes = {node("Mul", {"x", "three"}, "t"), node("Add", {"t", "one"}, "y"),
             node("Neg", {"x"}, "z")};
  g.outputs = {{"y", {}}, {"z", {}}};
  return g;
}

HostTensor values(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 0.37f * static_cast<float>(i) - 5.0f;
  return HostTensor::from_vector(v, {n});
}

class RunChannel : public testing::OwnBrokerSuite {
 protected:
  void SetUp() override {
    ASSERT_NE(broker_, nullptr);
    stub_ = testing::raw_stub(broker_->address());
    socket_ = testing::region_socket(*stub_);
  }

  Result<std::unique_ptr<rpc::RemoteClient>> client(const std::string& transport) {
    rpc::RemoteClientOptions o;
    o.transport = transport;
    return rpc::RemoteClient::connect(broker_->address(), o);
  }

  std::string open_session() { return testing::open_raw_session(*stub_); }
  void close_session(const std::string& s) {
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, s);
    v1::CloseSessionRequest req;
    v1::CloseSessionResponse resp;
    grpc::Status st = stub_->CloseSession(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
  }
  grpc::Status open_channel(const std::string& s, std::string* ticket) {
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, s);
    v1::RunChannelRequest req;
    v1::RunChannelResponse resp;
    grpc::Status st = stub_->OpenRunChannel(&ctx, req, &resp);
    *ticket = resp.ticket();
    if (st.ok()) EXPECT_GE(resp.max_message_bytes(), 64 << 10);
    return st;
  }
  // A channel of session `s`, its end redeemed: the descriptor (or -1, failing the test).
  int channel_fd(const std::string& s) {
    std::string ticket;
    grpc::Status st = open_channel(s, &ticket);
    EXPECT_TRUE(st.ok()) << st.error_message();
    auto fd = rpc::receive_region_fd(socket_, ticket, milliseconds(5000));
    EXPECT_TRUE(fd.ok()) << fd.status().to_string();
    return fd.ok() ? *fd : -1;
  }
  // One message out, one answer back.
  static v1::ChannelAnswer exchange(int fd, const std::string& bytes) {
    v1::ChannelAnswer answer;
    EXPECT_GE(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), 0) << std::strerror(errno);
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 10000), 1) << "no answer in 10 s";
    std::string buf(static_cast<size_t>(rpc::kChannelMaxMessage), '\0');
    const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    EXPECT_GT(n, 0) << std::strerror(errno);
    if (n > 0) EXPECT_TRUE(answer.ParseFromArray(buf.data(), static_cast<int>(n)));
    return answer;
  }
  nlohmann::json broker_status() {
    grpc::ClientContext ctx;
    testing::prepare_call(ctx, "");
    v1::BrokerStatusRequest req;
    v1::BrokerStatusResponse resp;
    grpc::Status st = stub_->BrokerStatus(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << st.error_message();
    return nlohmann::json::parse(resp.json(), nullptr, false);
  }
  int64_t calls_of(const std::string& method) {
    const nlohmann::json status = broker_status();  // (kept: the loop reads into it)
    for (const auto& m : status["methods"])
      if (m["name"] == method) return m["count"].get<int64_t>();
    return 0;
  }
  void expect_alive() {
    ASSERT_EQ(kill(broker_->pid(), 0), 0) << "the broker process is gone";
    auto c = client("auto");
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    auto model = (*c)->load(affine_graph(4), "cpu:0");
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    auto x = (*c)->upload(values(4).view(), "cpu:0");
    ASSERT_TRUE(x.ok());
    auto out = (*c)->run(*model, {*x});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto y = (*c)->read((*out)[0]);
    ASSERT_TRUE(y.ok());
    EXPECT_FLOAT_EQ(y->data<float>()[1], (0.37f - 5.0f) * 3.0f + 1.0f);
  }

  std::unique_ptr<v1::Tensord::Stub> stub_;
  std::string socket_;
};

TEST_F(RunChannel, ASameHostClientUsesItAndItsAnswersEqualGrpcs) {
  auto fast = client("auto");
  auto slow = client("grpc");
  ASSERT_TRUE(fast.ok()) << fast.status().to_string();
  ASSERT_TRUE(slow.ok()) << slow.status().to_string();
  const int64_t n = 3000;  // 12 KB per output: inline values
  const int64_t runs_before = calls_of("RunModel"), executes_before = calls_of("Execute");
  std::vector<std::vector<HostTensor>> got(2);
  int k = 0;
  for (auto* c : {fast->get(), slow->get()}) {
    auto model = c->load(affine_graph(n), "cpu:0");
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    auto x = c->upload(values(n).view(), "cpu:0");
    ASSERT_TRUE(x.ok()) << x.status().to_string();
    for (int i = 0; i < 3; ++i) {
      auto out = c->run(*model, {*x});
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      ASSERT_EQ(out->size(), 2u);
      for (TensorHandle h : *out) {
        auto t = c->read(h);
        ASSERT_TRUE(t.ok()) << t.status().to_string();
        got[k].push_back(std::move(t).value());
        ASSERT_TRUE(c->release(h).ok());
      }
    }
    auto ex = c->execute(affine_graph(n), {*x}, "");
    ASSERT_TRUE(ex.ok()) << ex.status().to_string();
    for (TensorHandle h : *ex) {
      auto t = c->read(h);
      ASSERT_TRUE(t.ok()) << t.status().to_string();
      got[k].push_back(std::move(t).value());
    }
    // The same mistake, the same answer: a wrong dtype, a model handle that is not there.
    auto wrong = c->upload(HostTensor::from_vector<int32_t>({1, 2, 3}, {3}).view(), "cpu:0");
    ASSERT_TRUE(wrong.ok());
    auto bad = c->run(*model, {*wrong});
    EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().to_string();
    EXPECT_NE(bad.status().message().find("expects float32, got int32"), std::string::npos)
        << bad.status().to_string();
    auto missing = c->run(*model + 1000, {*x});
    EXPECT_EQ(missing.status().code(), StatusCode::kNotFound) << missing.status().to_string();
    ++k;
  }
  EXPECT_TRUE((*fast)->uses_run_channel()) << "a client on the broker's host takes the channel";
  EXPECT_FALSE((*slow)->uses_run_channel()) << "transport 'grpc' keeps to gRPC";
  ASSERT_EQ(got[0].size(), got[1].size());
  for (size_t i = 0; i < got[0].size(); ++i) {
    ASSERT_EQ(got[0][i].nbytes(), got[1][i].nbytes());
    EXPECT_EQ(std::memcmp(got[0][i].data(), got[1][i].data(), got[0][i].nbytes()), 0) << i;
  }
  EXPECT_FLOAT_EQ(got[0][0].data<float>()[10], (3.7f - 5.0f) * 3.0f + 1.0f);
  // Counted alike, whichever way they came: 3 good runs and 2 refused per client.
  EXPECT_EQ(calls_of("RunModel") - runs_before, 10);
  EXPECT_EQ(calls_of("Execute") - executes_before, 2);
  int refused = 0;
  const nlohmann::json status = broker_status();
  for (const auto& e : status["recent_errors"])
    refused += e["method"] == "RunModel" && e["code"] == "INVALID_ARGUMENT" &&
               e["message"] == "graph input 'x' expects float32, got int32";
  EXPECT_EQ(refused, 2) << "the refused run through the channel is among the recent errors "
                           "with the one through gRPC";
}

TEST_F(RunChannel, PipelinedRunsQueueOnTheChannelAndAnswerInOrder) {
  rpc::RemoteClientOptions o;
  o.pipeline_runs = true;
  auto c = rpc::RemoteClient::connect(broker_->address(), o);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  const int64_t n = 1000;
  auto model = (*c)->load(affine_graph(n), "cpu:0");
  ASSERT_TRUE(model.ok());
  auto x = (*c)->upload(values(n).view(), "cpu:0");
  ASSERT_TRUE(x.ok());
  std::vector<std::vector<TensorHandle>> outs;
  for (int i = 0; i < 6; ++i) {  // sent without waiting; read back in the order asked
    auto out = (*c)->run(*model, {*x});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    outs.push_back(*out);
  }
  EXPECT_TRUE((*c)->uses_run_channel());
  for (int i = 5; i >= 0; --i) {  // the newest first: the older answers are read on the way
    auto z = (*c)->read(outs[static_cast<size_t>(i)][1]);
    ASSERT_TRUE(z.ok()) << z.status().to_string();
    EXPECT_FLOAT_EQ(z->data<float>()[2], -(0.74f - 5.0f));
  }
  // A synchronous execute after pipelined runs: their answers first, then its own.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE((*c)->run(*model, {*x}).ok());
  auto ex = (*c)->execute(affine_graph(n), {*x}, "");
  ASSERT_TRUE(ex.ok()) << ex.status().to_string();
  auto y = (*c)->read((*ex)[0]);
  ASSERT_TRUE(y.ok());
  EXPECT_FLOAT_EQ(y->data<float>()[0], -14.0f);
}

TEST_F(RunChannel, HostileMessagesGetAClearAnswerAndTheBrokerServesOn) {
  const std::string s = open_session();
  const int fd = channel_fd(s);
  ASSERT_GE(fd, 0);
  // Bytes that are no request.
  v1::ChannelAnswer a = exchange(fd, std::string("\xff\xff\xff\x07garbage", 11));
  EXPECT_EQ(a.code(), static_cast<int>(StatusCode::kInvalidArgument));
  EXPECT_NE(a.message().find("not a tensord.v1.ChannelRequest"), std::string::npos) << a.message();
  // A request naming no call.
  v1::ChannelRequest empty;
  empty.set_timeout_ms(1000);
  a = exchange(fd, empty.SerializeAsString());
  EXPECT_EQ(a.code(), static_cast<int>(StatusCode::kInvalidArgument));
  EXPECT_NE(a.message().find("names no call"), std::string::npos) << a.message();
  // Over the channel's limit (the send buffer made large enough to send it at all).
  const int64_t big = rpc::kChannelMaxMessage + (16 << 10);
  if (rpc::seqpacket_send_limit(fd, big) >= big) {
    a = exchange(fd, std::string(static_cast<size_t>(big), 'x'));
    EXPECT_EQ(a.code(), static_cast<int>(StatusCode::kInvalidArgument));
    EXPECT_NE(a.message().find("over the channel's limit"), std::string::npos) << a.message();
  } else {
    std::fprintf(stderr, "note: net.core.wmem_max too small to send an oversized message\n");
  }
  // Another session's model and tensor: not found in this one.
  auto other = client("auto");
  ASSERT_TRUE(other.ok());
  auto model = (*other)->load(affine_graph(4), "cpu:0");
  ASSERT_TRUE(model.ok());
  auto x = (*other)->upload(values(4).view(), "cpu:0");
  ASSERT_TRUE(x.ok());
  v1::ChannelRequest steal;
  steal.mutable_run()->set_model(*model);
  steal.mutable_run()->add_inputs(*x);
  steal.mutable_run()->set_inline_max_bytes(1 << 20);
  a = exchange(fd, steal.SerializeAsString());
  EXPECT_EQ(a.code(), static_cast<int>(StatusCode::kNotFound)) << a.message();
  EXPECT_EQ(a.run().values_size(), 0);
  // The ticket was spent on redeeming: a second try gets nothing.
  std::string ticket;
  ASSERT_TRUE(open_channel(s, &ticket).ok());
  auto first = rpc::receive_region_fd(socket_, ticket, milliseconds(5000));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto again = rpc::receive_region_fd(socket_, ticket, milliseconds(5000));
  EXPECT_FALSE(again.ok());
  // At most kMaxRunChannelsPerSession (4) per session: two open, two more, then refused.
  std::vector<int> more;
  for (int i = 0; i < 2; ++i) more.push_back(channel_fd(s));
  grpc::Status fifth = open_channel(s, &ticket);
  EXPECT_EQ(fifth.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << fifth.error_message();
  EXPECT_NE(fifth.error_message().find("run channels open"), std::string::npos)
      << fifth.error_message();
  // Closing the session ends its channels: the broker's end shuts down.
  close_session(s);
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1) << "the channel outlived its session";
  char byte;
  EXPECT_EQ(recv(fd, &byte, 1, MSG_DONTWAIT), 0) << "end of stream";
  close(fd);
  close(*first);
  for (int f : more) close(f);
  expect_alive();
}

}  // namespace
}  // namespace tensord
