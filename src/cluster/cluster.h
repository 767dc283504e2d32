// The cluster: `mpirun -np N tensord serve --cluster --listen ADDR`. Every MPI rank owns its
// machine's devices; rank 0 serves the gRPC front with an Engine that sees every other rank's
// devices as proxy devices named "n<rank>/<name>" ("n2/cpu:0"); its own devices keep their
// bare names and also answer to "n0/<name>".
//
// A proxy device's memory lives on its rank (a buffer's ptr is a handle the rank gave out);
// host<->proxy copies are MPI point-to-point messages, chunked and all posted at once
// (pipelined); a node placed on a proxy device is shipped to its rank (serialized as a
// one-node graph), compiled there for the rank's own device (with that rank's own cpu:0 as
// its fallback) and run on the buffers named by handle.
//
// Failure: MPI_ERRORS_RETURN on the communicator and no blocking MPI call after start-up: every
// wait is a test loop that gives up when the rank is marked dead. Rank 0 pings every rank every
// timeout/3; a rank that does not answer within the timeout is marked dead and its devices
// answer UNAVAILABLE ("n2 (MPI rank 2) stopped answering ...") from then on, while the other
// ranks keep serving. (mpirun kills the whole job when a rank dies unless started with
// --enable-recovery; see the README.) A worker whose rank 0 stops pinging for 3 timeouts exits.
#pragma once

#include <chrono>
#include <string>

#include "tensord/status.h"

namespace tensord::cluster {

struct ClusterOptions {
  // How long a rank may go without answering before its devices are UNAVAILABLE.
  std::chrono::milliseconds timeout{3000};
};

struct Started {
  int rank = 0;
  int size = 1;
  // Rank 0: -1 (go on serving). Other ranks: their worker loop has ended; exit with this code.
  int exit_code = -1;
};

// Whether this build has MPI (the CMake option TENSORD_MPI).
bool built_with_mpi();

// Initializes MPI (MPI_THREAD_MULTIPLE when provided, else serialized calls) and exchanges the
// ranks' device lists. Rank 0 returns at once with the proxy devices registered for the
// engine it creates next (add_backend_factory); every other rank serves rank 0's requests until
// told to stop (or rank 0 stops pinging) and returns its exit code. FAILED_PRECONDITION when
// built without MPI.
Result<Started> start(const ClusterOptions& options);

// Rank 0: tells the workers to exit and finalizes MPI (skipped when a rank died: finalizing
// would wait for it). Proxy devices answer UNAVAILABLE afterwards. Idempotent.
void stop();

// One line: ranks, their state, MPI thread level (for the serve log).
std::string describe();

}  // namespace tensord::cluster
