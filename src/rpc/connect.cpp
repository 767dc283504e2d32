// tensord::connect (tensord/client.h): the embedded client, or a broker's RemoteClient. It lives
// beside the gRPC client so that src/client/ (the embedded side) builds without gRPC.
#include <cstdlib>

#include "rpc/remote_client.h"
#include "tensord/client.h"

namespace tensord {

Result<std::unique_ptr<Client>> connect(const std::string& address) {
  std::string addr = address;
  if (addr.empty())
    if (const char* env = std::getenv("TENSORD_ADDRESS")) addr = env;
  if (addr.empty()) return make_local_client();
  // A broker: HOST:PORT or unix:PATH (see src/rpc/remote_client.h).
  TD_ASSIGN_OR_RETURN(auto remote, rpc::RemoteClient::connect(addr));
  return std::unique_ptr<Client>(std::move(remote));
}

}  // namespace tensord
