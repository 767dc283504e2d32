// The cluster layer in a build without MPI (TENSORD_MPI=OFF): `serve --cluster` says so.
#include "cluster/cluster.h"

namespace tensord::cluster {

bool built_with_mpi() { return false; }

Result<Started> start(const ClusterOptions&) {
  return Status(StatusCode::kFailedPrecondition,
                "--cluster: this tensord was built without MPI (install libopenmpi-dev and "
                "configure with -DTENSORD_MPI=ON)");
}

void stop() {}

std::string describe() { return "built without MPI"; }

}  // namespace tensord::cluster
