// Uses only the installed public headers: connect (embedded, or TENSORD_ADDRESS), the Array
// API, and an ONNX model loaded from a file and from bytes. Exit 0 when every value is right.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tensord/array.h"
#include "tensord/client.h"
#include "tensord/onnx.h"

using namespace tensord;

static int fail(const char* what, const Status& s) {
  std::fprintf(stderr, "FAIL %s: %s\n", what, s.to_string().c_str());
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 2) return std::fprintf(stderr, "usage: consumer MODEL.onnx\n"), 2;
  auto client = connect();
  if (!client.ok()) return fail("connect", client.status());
  std::shared_ptr<Client> c(std::move(*client));
  auto devices = c->devices();
  if (!devices.ok()) return fail("devices", devices.status());
  std::printf("devices: %zu, default %s\n", devices->size(), c->default_device().c_str());

  auto ctx = std::make_shared<Context>(c);
  Array x = Array::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}, "", ctx);
  Array y = ((x * 2.0f + 1.0f).sum({1}));
  auto v = y.to_vector<float>();
  if (!v.ok()) return fail("array", v.status());
  if ((*v)[0] != 15 || (*v)[1] != 33) return std::fprintf(stderr, "FAIL array values\n"), 1;

  // The model computes Y = X + X (made by run.sh with python3-onnx).
  auto g = load_onnx_file(argv[1]);
  if (!g.ok()) return fail("load_onnx_file", g.status());
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  auto g2 = load_onnx_bytes(bytes.str(), argv[1]);
  if (!g2.ok()) return fail("load_onnx_bytes", g2.status());
  auto bad = load_onnx_bytes(std::string("garbage"), "garbage");
  if (bad.ok()) return std::fprintf(stderr, "FAIL garbage bytes loaded\n"), 1;
  auto model = c->load(*g, "");
  if (!model.ok()) return fail("load", model.status());
  auto in_h = x.handle();
  if (!in_h.ok()) return fail("handle", in_h.status());
  auto outs = c->run(*model, {*in_h});
  if (!outs.ok()) return fail("run", outs.status());
  auto host = c->read((*outs)[0]);
  if (!host.ok()) return fail("read", host.status());
  for (int i = 0; i < 6; ++i)
    if (host->data<float>()[i] != 2.0f * (i + 1))
      return std::fprintf(stderr, "FAIL model value %d\n", i), 1;
  (void)c->release((*outs)[0]);
  std::printf("ok (%s)\n", std::getenv("TENSORD_ADDRESS") ? "remote" : "embedded");
  return 0;
}
