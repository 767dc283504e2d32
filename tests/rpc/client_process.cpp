// A client process for the broker tests to kill: connects to the broker named by argv[1],
// uploads a tensor it keeps, starts a 64 MiB streamed upload on its session and stops halfway,
// prints "ready <session>" and waits to be killed.
// With a second argument "loop": starts an endless Loop (tests/rpc/sched_graphs.h) through
// the client API instead, prints "ready <session>" and waits in that call to be killed.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "rpc/remote_client.h"
#include "sched_graphs.h"
#include "rpc/wire.h"
#include "tensord.grpc.pb.h"

int main(int argc, char** argv) {
  using namespace tensord;
  const std::string mode = argc == 3 ? argv[2] : "";
  if (argc != 2 && !(argc == 3 && (mode == "loop" || mode == "mixed"))) {
    std::fprintf(stderr, "usage: %s ADDRESS [loop|mixed]\n", argv[0]);
    return 2;
  }
  auto c = rpc::RemoteClient::connect(argv[1]);
  if (!c.ok()) {
    std::fprintf(stderr, "connect: %s\n", c.status().to_string().c_str());
    return 1;
  }
  if (mode == "mixed") {
    // Everything a client can leave on the broker at once: a kept tensor, one through shared
    // memory (a registered region), a loaded model, an upload stopped halfway, and a running
    // graph whose answer it waits for.
    HostTensor kept = HostTensor::from_vector<float>(std::vector<float>(1000, 1.0f), {1000});
    HostTensor big = HostTensor::from_vector<float>(std::vector<float>(1 << 16, 2.0f), {1 << 16});
    if (!(*c)->upload(kept.view(), "").ok() || !(*c)->upload(big.view(), "").ok()) return 1;
    Graph g;
    g.inputs = {{"x", {}}};
    Node n;
    n.name = "relu";
    n.op = "Relu";
    n.inputs = {"x"};
    n.outputs = {"y"};
    g.nodes = {n};
    g.outputs = {{"y", {}}};
    g.initializers.emplace("unused", HostTensor::from_vector<float>(std::vector<float>(4096, 0.f), {4096}));
    if (!(*c)->load(g, "").ok()) return 1;
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
    auto stub = v1::Tensord::NewStub(
        grpc::CreateCustomChannel(argv[1], grpc::InsecureChannelCredentials(), args));
    grpc::ClientContext ctx;
    ctx.AddMetadata(rpc::kSessionKey, (*c)->session());
    v1::UploadResponse resp;
    auto w = stub->Upload(&ctx, &resp);
    v1::UploadChunk chunk;
    chunk.mutable_header()->set_dtype(1);
    chunk.mutable_header()->add_shape(1 << 20);
    chunk.mutable_header()->set_total_bytes(4 << 20);
    chunk.set_data(std::string(1 << 20, 'a'));
    if (!w->Write(chunk)) return 1;
    auto m = (*c)->upload(HostTensor::scalar<int64_t>(INT64_MAX).view(), "");
    auto cond = (*c)->upload(HostTensor::scalar<bool>(true).view(), "");
    auto x = (*c)->upload(HostTensor::from_vector<float>({0.0f}, {1}).view(), "");
    if (!m.ok() || !cond.ok() || !x.ok()) return 1;
    std::printf("ready %s\n", (*c)->session().c_str());
    std::fflush(stdout);
    // Its small output is answered inline: the call waits for the loop, which never ends.
    auto y = (*c)->execute(testing::long_loop_graph(), {*m, *cond, *x}, "");
    if (y.ok()) (void)(*c)->read(y->at(0));
    while (true) pause();
  }
  if (argc == 3) {
    auto m = (*c)->upload(HostTensor::scalar<int64_t>(INT64_MAX).view(), "");
    auto cond = (*c)->upload(HostTensor::scalar<bool>(true).view(), "");
    auto x = (*c)->upload(HostTensor::from_vector<float>({0.0f}, {1}).view(), "");
    if (!m.ok() || !cond.ok() || !x.ok()) return 1;
    std::printf("ready %s\n", (*c)->session().c_str());
    std::fflush(stdout);
    auto y = (*c)->execute(testing::long_loop_graph(), {*m, *cond, *x}, "");
    if (y.ok()) (void)(*c)->read(y->at(0));  // never returns: the loop does not end
    while (true) pause();
  }
  HostTensor kept = HostTensor::from_vector<float>(std::vector<float>(1000, 1.0f), {1000});
  if (!(*c)->upload(kept.view(), "").ok()) return 1;

  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  auto stub = v1::Tensord::NewStub(
      grpc::CreateCustomChannel(argv[1], grpc::InsecureChannelCredentials(), args));
  grpc::ClientContext ctx;
  ctx.AddMetadata(rpc::kSessionKey, (*c)->session());
  v1::UploadResponse resp;
  auto w = stub->Upload(&ctx, &resp);
  v1::UploadChunk m;
  m.mutable_header()->set_dtype(1);
  m.mutable_header()->add_shape(16 << 20);
  m.mutable_header()->set_total_bytes(64 << 20);
  m.set_data(std::string(1 << 20, 'a'));
  if (!w->Write(m)) return 1;
  m.clear_header();
  if (!w->Write(m)) return 1;
  std::printf("ready %s\n", (*c)->session().c_str());
  std::fflush(stdout);
  while (true) pause();
}
