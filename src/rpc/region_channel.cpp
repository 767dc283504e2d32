#include "rpc/region_channel.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/errors.h"

namespace tensord::rpc {
namespace {

using Clock = std::chrono::steady_clock;

// A client sends its message right after connecting; one that does not is dropped after this.
constexpr std::chrono::milliseconds kConnectionTimeout{2000};
constexpr size_t kMaxConnections = 64;
constexpr size_t kTicketBytes = 16;  // 128 bits, hex-encoded on the wire
constexpr size_t kMaxDescriptors = 8;

// "@name" is an abstract socket (no file, gone with the process), anything else a path.
Result<std::pair<sockaddr_un, socklen_t>> socket_address(const std::string& name) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const bool abstract = !name.empty() && name[0] == '@';
  const std::string_view body = abstract ? std::string_view(name).substr(1) : name;
  if (body.empty() || body.size() + 1 > sizeof(addr.sun_path))
    return errors::InvalidArgument("region socket '{}': not a unix socket name", name);
  std::memcpy(addr.sun_path + (abstract ? 1 : 0), body.data(), body.size());
  // An abstract name is exactly its bytes (after the leading NUL): no terminator counted.
  const socklen_t len =
      abstract ? static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + body.size())
               : static_cast<socklen_t>(sizeof(addr));
  return std::make_pair(addr, len);
}

Result<std::string> random_hex(size_t bytes) {
  unsigned char raw[64];
  if (bytes > sizeof raw) return errors::Internal("random_hex: {} bytes", bytes);
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = getrandom(raw + got, bytes - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return errors::Unavailable("the OS random source failed: {}", std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < bytes; ++i) {
    s.push_back(kHex[raw[i] >> 4]);
    s.push_back(kHex[raw[i] & 15]);
  }
  return s;
}

// A descriptor closed when this goes.
struct FdCloser {
  int fd;
  ~FdCloser() { close(fd); }
};

// One message: `text`, with `fd` attached (SCM_RIGHTS) unless it is negative.
ssize_t send_message(int sock, std::string_view text, int fd, int flags) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (fd >= 0) {
    m.msg_control = cbuf;
    m.msg_controllen = sizeof cbuf;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t n;
  do {
    n = sendmsg(sock, &m, flags | MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR && !(flags & MSG_DONTWAIT));
  return n;
}

// The descriptors a received message carries (now the caller's to close).
std::vector<int> received_fds(msghdr& m) {
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      fds.push_back(f);
    }
  }
  return fds;
}

// Client side: connects to the region socket, sends `ticket` (with `fd` attached unless it is
// negative) and waits up to `timeout` for the answer: its text, and any descriptors with it.
Result<std::pair<std::string, std::vector<int>>> exchange(const std::string& socket_name,
                                                          std::string_view ticket, int fd,
                                                          std::chrono::milliseconds timeout) {
  TD_ASSIGN_OR_RETURN(auto addr, socket_address(socket_name));
  const int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (s < 0) return errors::Unavailable("region socket: socket(): {}", std::strerror(errno));
  FdCloser closer{s};
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(s, reinterpret_cast<const sockaddr*>(&addr.first), addr.second) != 0)
    return errors::Unavailable("region socket '{}': cannot connect: {}", socket_name,
                               std::strerror(errno));
  if (send_message(s, ticket, fd, 0) < 0)
    return errors::Unavailable("region socket '{}': cannot send the {}: {}", socket_name,
                               fd >= 0 ? "descriptor" : "ticket", std::strerror(errno));
  char reply[512];
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 4)];
  iovec iov{reply, sizeof reply};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof cbuf;
  ssize_t n;
  do {
    n = recvmsg(s, &m, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n <= 0)
    return errors::Unavailable("region socket '{}': no answer from the broker ({})", socket_name,
                               n < 0 ? std::strerror(errno) : "closed");
  return std::make_pair(std::string(reply, static_cast<size_t>(n)), received_fds(m));
}

}  // namespace

int64_t seqpacket_send_limit(int fd, int64_t want) {
  // Linux doubles what is asked (for its bookkeeping), caps the request at wmem_max, and
  // refuses a message longer than the buffer less 32 bytes; a little more is kept for the
  // message's own accounting.
  constexpr int64_t kSlack = 4096;
  const int ask = static_cast<int>(std::min<int64_t>(want + kSlack, 64 << 20));
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &ask, sizeof ask);
  int have = 0;
  socklen_t len = sizeof have;
  if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &have, &len) != 0) return 0;
  return std::max<int64_t>(0, std::min<int64_t>(want, static_cast<int64_t>(have) - kSlack));
}

Status send_region_fd(const std::string& socket_name, std::string_view ticket, int fd,
                      std::chrono::milliseconds timeout) {
  TD_ASSIGN_OR_RETURN(auto answer, exchange(socket_name, ticket, fd, timeout));
  for (int f : answer.second) close(f);  // (the broker sends none with this answer)
  if (answer.first == "ok") return OkStatus();
  return errors::FailedPrecondition("region socket: the broker refused the descriptor: {}",
                                    answer.first);
}

Result<int> receive_region_fd(const std::string& socket_name, std::string_view ticket,
                              std::chrono::milliseconds timeout) {
  TD_ASSIGN_OR_RETURN(auto answer, exchange(socket_name, ticket, -1, timeout));
  const auto& [text, fds] = answer;
  if (text == "ok" && fds.size() == 1) return fds[0];
  for (int f : fds) close(f);
  if (text == "ok")
    return errors::Internal("region socket: the broker answered with {} descriptors, not one",
                            fds.size());
  return errors::FailedPrecondition("region socket: the broker refused the ticket: {}", text);
}

struct RegionChannel::State {
  struct Ticket {
    uint64_t owner = 0;
    std::string group;
    Clock::time_point expires;
    int fd = -1;
    bool outgoing = false;  // offer(): fd is the broker's, sent to whoever names the ticket
  };
  struct Connection {
    int fd;
    Clock::time_point deadline;
  };

  int listen_fd = -1;
  int wake_fd = -1;
  std::string name;
  std::thread thread;
  mutable std::mutex mu;
  std::unordered_map<std::string, Ticket> tickets;

  ~State() {
    if (thread.joinable()) {
      const uint64_t one = 1;
      (void)!write(wake_fd, &one, sizeof one);
      thread.join();
    }
    if (listen_fd >= 0) close(listen_fd);
    if (wake_fd >= 0) close(wake_fd);
    for (auto& [t, v] : tickets)
      if (v.fd >= 0) close(v.fd);
  }

  // Drops expired tickets; their descriptors are returned for closing outside the lock.
  void sweep_locked(Clock::time_point now, std::vector<int>& dead) {
    for (auto it = tickets.begin(); it != tickets.end();) {
      if (it->second.expires <= now) {
        if (it->second.fd >= 0) dead.push_back(it->second.fd);
        it = tickets.erase(it);
      } else {
        ++it;
      }
    }
  }

  // One message from a connection: the ticket as text, one descriptor. Returns false when the
  // connection has nothing to read yet.
  bool serve(int conn) {
    char buf[128];
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * kMaxDescriptors)];
    iovec iov{buf, sizeof buf};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf;
    m.msg_controllen = sizeof cbuf;
    const ssize_t n = recvmsg(conn, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
    std::vector<int> fds;
    if (n >= 0) fds = received_fds(m);
    std::string answer;
    int give = -1;  // an offered descriptor, sent with "ok"
    if (n <= 0) {
      answer.clear();  // the peer went away (or failed): nobody to answer
    } else if (m.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) {
      answer = "the message is too long or carries too many descriptors";
    } else if (fds.empty()) {
      // A ticket of offer(): its descriptor goes back to the sender.
      const std::string ticket(buf, static_cast<size_t>(n));
      std::lock_guard<std::mutex> lock(mu);
      auto it = tickets.find(ticket);
      if (it == tickets.end() || !it->second.outgoing || it->second.expires <= Clock::now()) {
        answer = "expected one descriptor (SCM_RIGHTS) with the ticket, got 0";
      } else {
        give = it->second.fd;
        tickets.erase(it);
        answer = "ok";
      }
    } else if (fds.size() != 1) {
      answer =
          "expected one descriptor (SCM_RIGHTS) with the ticket, got " + std::to_string(fds.size());
    } else {
      const std::string ticket(buf, static_cast<size_t>(n));
      std::lock_guard<std::mutex> lock(mu);
      auto it = tickets.find(ticket);
      if (it == tickets.end() || it->second.expires <= Clock::now()) {
        answer = "unknown or expired region ticket (ask for one with RegionTicket, in the session)";
      } else if (it->second.fd >= 0 || it->second.outgoing) {
        answer = "this region ticket already carries a descriptor";
      } else {
        it->second.fd = fds[0];
        fds.clear();
        answer = "ok";
      }
    }
    for (int f : fds) close(f);
    if (!answer.empty()) (void)send_message(conn, answer, give, MSG_DONTWAIT);
    if (give >= 0) close(give);  // the receiver has its own copy now (or nobody wanted it)
    return true;
  }

  void loop() {
    std::vector<Connection> conns;
    std::vector<pollfd> p;
    for (;;) {
      auto now = Clock::now();
      p.clear();
      p.push_back({wake_fd, POLLIN, 0});
      p.push_back({listen_fd, POLLIN, 0});
      auto wait = std::chrono::milliseconds(1000);
      for (const auto& c : conns) {
        p.push_back({c.fd, POLLIN, 0});
        wait =
            std::min(wait, std::chrono::duration_cast<std::chrono::milliseconds>(c.deadline - now) +
                               std::chrono::milliseconds(1));
      }
      const int r = poll(p.data(), p.size(), static_cast<int>(std::max<int64_t>(wait.count(), 0)));
      if (r < 0 && errno != EINTR) break;
      if (p[0].revents) break;  // stopping
      now = Clock::now();
      // Served or dead connections go; so do those past their deadline.
      std::vector<Connection> keep;
      for (size_t i = 0; i < conns.size(); ++i) {
        const short ev = p[i + 2].revents;
        bool done = false;
        if (ev & POLLIN) done = serve(conns[i].fd);
        if (!done && (ev & (POLLERR | POLLHUP | POLLNVAL))) done = true;
        if (!done && conns[i].deadline <= now) done = true;
        if (done)
          close(conns[i].fd);
        else
          keep.push_back(conns[i]);
      }
      conns.swap(keep);
      if (p[1].revents & POLLIN) {
        // Always accepted; past the limit the oldest connection goes. A client sends at once
        // after connecting, so connections held open without a message (a local process
        // need not have a token to connect) cannot keep real clients out.
        for (int i = 0; i < 64; ++i) {
          const int c = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
          if (c < 0) break;
          if (serve(c)) {  // its message is already there
            close(c);
            continue;
          }
          if (conns.size() >= kMaxConnections) {
            close(conns.front().fd);
            conns.erase(conns.begin());
          }
          conns.push_back({c, now + kConnectionTimeout});
        }
      }
      std::vector<int> dead;
      {
        std::lock_guard<std::mutex> lock(mu);
        sweep_locked(now, dead);
      }
      for (int f : dead) close(f);
    }
    for (const auto& c : conns) close(c.fd);
  }
};

RegionChannel::RegionChannel(std::unique_ptr<State> state) : state_(std::move(state)) {}
RegionChannel::~RegionChannel() = default;

Result<std::unique_ptr<RegionChannel>> RegionChannel::open() {
  auto st = std::make_unique<State>();
  TD_ASSIGN_OR_RETURN(std::string suffix, random_hex(16));
  st->name = "@tensord-fd-" + suffix;
  TD_ASSIGN_OR_RETURN(auto addr, socket_address(st->name));
  st->listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (st->listen_fd < 0)
    return errors::Unavailable("region socket: socket(): {}", std::strerror(errno));
  if (bind(st->listen_fd, reinterpret_cast<const sockaddr*>(&addr.first), addr.second) != 0 ||
      listen(st->listen_fd, 64) != 0)
    return errors::Unavailable("region socket '{}': cannot listen: {}", st->name,
                               std::strerror(errno));
  st->wake_fd = eventfd(0, EFD_CLOEXEC);
  if (st->wake_fd < 0)
    return errors::Unavailable("region socket: eventfd(): {}", std::strerror(errno));
  State* raw = st.get();
  st->thread = std::thread([raw] { raw->loop(); });
  return std::unique_ptr<RegionChannel>(new RegionChannel(std::move(st)));
}

const std::string& RegionChannel::name() const { return state_->name; }

Result<std::string> RegionChannel::issue(uint64_t owner, const std::string& group) {
  TD_ASSIGN_OR_RETURN(std::string ticket, random_hex(kTicketBytes));
  std::vector<int> dead;
  Status refused;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    const auto now = Clock::now();
    state_->sweep_locked(now, dead);
    size_t mine = 0, ours = 0;
    for (const auto& [t, v] : state_->tickets) {
      mine += v.owner == owner;
      ours += v.group == group;
    }
    if (mine >= kMaxTicketsPerOwner) {
      refused = errors::ResourceExhausted(
          "RegionTicket: this session already has {} region tickets pending (at most {}; a ticket "
          "is spent by RegisterRegion or expires after {} s)",
          mine, kMaxTicketsPerOwner, kTicketTtl.count());
    } else if (ours >= kMaxTicketsPerGroup) {
      refused = errors::ResourceExhausted(
          "RegionTicket: this tenant's sessions have {} region tickets pending (at most {}; a "
          "ticket is spent by RegisterRegion or expires after {} s)",
          ours, kMaxTicketsPerGroup, kTicketTtl.count());
    } else if (state_->tickets.size() >= kMaxTickets) {
      refused = errors::ResourceExhausted(
          "RegionTicket: the broker has {} region tickets pending, its limit; try again in {} s",
          state_->tickets.size(), kTicketTtl.count());
    } else {
      state_->tickets.emplace(ticket, State::Ticket{owner, group, now + kTicketTtl, -1});
    }
  }
  for (int f : dead) close(f);
  if (!refused.ok()) return refused;
  return ticket;
}

Result<std::string> RegionChannel::offer(uint64_t owner, int fd, const std::string& group) {
  auto ticket = issue(owner, group);
  if (!ticket.ok()) {
    close(fd);
    return ticket.status();
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->tickets.find(*ticket);
  if (it == state_->tickets.end()) {  // swept already (a clock jump): nothing to hand out
    close(fd);
    return errors::Unavailable("region socket: the ticket expired at once");
  }
  it->second.fd = fd;
  it->second.outgoing = true;
  return ticket;
}

Result<int> RegionChannel::redeem(uint64_t owner, std::string_view ticket) {
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->tickets.find(std::string(ticket));
  // One answer for a ticket that is unknown, expired, spent or another session's: a session
  // learns nothing about tickets that are not its own.
  if (it == state_->tickets.end() || it->second.owner != owner ||
      it->second.expires <= Clock::now())
    return errors::NotFound(
        "RegisterRegion: no pending region ticket '{}' in this session (tickets are one-time, "
        "expire after {} s, and belong to the session that asked for them)",
        ticket.substr(0, 2 * kTicketBytes), kTicketTtl.count());
  if (it->second.fd < 0 || it->second.outgoing)
    return errors::FailedPrecondition(
        "RegisterRegion: no descriptor arrived with region ticket '{}': send the memfd over the "
        "region socket (SCM_RIGHTS) first",
        ticket);
  const int fd = it->second.fd;
  state_->tickets.erase(it);
  return fd;
}

size_t RegionChannel::pending() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->tickets.size();
}

}  // namespace tensord::rpc
