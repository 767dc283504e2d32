#include <cstdlib>

#include "core/errors.h"
#include "tensord/client.h"

namespace tensord {

Result<std::unique_ptr<Client>> connect(const std::string& address) {
  std::string addr = address;
  if (addr.empty())
    if (const char* env = std::getenv("TENSORD_ADDRESS")) addr = env;
  if (addr.empty()) return make_local_client();
  // The gRPC RemoteClient is not part of this build yet (see the broker issue).
  return errors::Unimplemented(
      "cannot connect to broker '{}': this build of tensord has no remote client yet; unset "
      "TENSORD_ADDRESS to use the embedded engine",
      addr);
}

}  // namespace tensord
