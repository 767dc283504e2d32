// Passing a shared-memory region's descriptor from a client to the broker (same host).
//
// A region is registered only by handing the broker the client's own descriptor, never by a
// path (a path into /proc would let one session name another's memfd, or the broker's own
// descriptors). The exchange:
//   1. in its session, the client asks for a one-time ticket (RegionTicket RPC);
//   2. it connects to the broker's region socket (an abstract unix socket, "@tensord-fd-<random>",
//      advertised by Handshake) and sends one SOCK_SEQPACKET message: the ticket as text, the
//      memfd attached with SCM_RIGHTS; the broker answers "ok" or why not;
//   3. it calls RegisterRegion naming the ticket: the broker checks the descriptor (a memfd
//      sealed against shrinking) and maps it.
// A ticket belongs to the session that asked for it (another session's RegisterRegion does not
// find it), is spent by its first use, carries one descriptor, and expires after kTicketTtl;
// the number of pending tickets is bounded per session and in all.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tensord/status.h"

namespace tensord::rpc {

// Client side: sends `fd` with `ticket` to the region socket `socket_name` ("@name" for the
// abstract namespace, else a filesystem path) and waits up to `timeout` for the answer.
Status send_region_fd(const std::string& socket_name, std::string_view ticket, int fd,
                      std::chrono::milliseconds timeout);

// Client side, the other way: sends `ticket` (no descriptor) and returns the descriptor the
// broker answers with (RegionChannel::offer), now the caller's to close.
Result<int> receive_region_fd(const std::string& socket_name, std::string_view ticket,
                              std::chrono::milliseconds timeout);

// Sizes the send buffer of the SOCK_SEQPACKET socket `fd` for messages of up to `want` bytes
// where the system allows it (net.core.wmem_max), and returns the largest message `fd` can
// send: at most `want`.
int64_t seqpacket_send_limit(int fd, int64_t want);

// Broker side: the region socket, its listening thread, and the pending tickets.
class RegionChannel {
 public:
  static constexpr std::chrono::seconds kTicketTtl{10};
  static constexpr size_t kMaxTicketsPerOwner = 8;
  // A ticket may hold a descriptor until it is spent or expires: one group (a tenant) may hold
  // at most a quarter of them, so that it cannot keep the others from registering regions.
  static constexpr size_t kMaxTicketsPerGroup = 64;
  static constexpr size_t kMaxTickets = 256;

  // Binds "@tensord-fd-<128 random bits>" and starts listening.
  static Result<std::unique_ptr<RegionChannel>> open();
  ~RegionChannel();  // stops the thread, closes every descriptor still held

  // The name a client connects to ("@..."), as Handshake advertises it.
  const std::string& name() const;

  // A new one-time ticket for `owner` (a session) of `group` (its tenant).
  Result<std::string> issue(uint64_t owner, const std::string& group = "");

  // The descriptor that arrived with `ticket`, now the caller's to close. The ticket is spent.
  // NOT_FOUND (the same words) for a ticket that is unknown, expired, spent or `owner`'s not.
  Result<int> redeem(uint64_t owner, std::string_view ticket);

  // A one-time ticket for `owner` under which the socket hands `fd` out (the channel owns it
  // now and closes it once sent or expired): whoever sends the ticket's text with no
  // descriptor attached gets "ok" with the descriptor.
  Result<std::string> offer(uint64_t owner, int fd, const std::string& group = "");

  // Pending tickets (for tests and accounting).
  size_t pending() const;

  struct State;

 private:
  explicit RegionChannel(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace tensord::rpc
