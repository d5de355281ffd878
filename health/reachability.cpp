#include "health/reachability.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "parallel/comm_gather.h"

namespace megatrain {
namespace {

// A non-blocking connection attempt to host:port; -1 when the name does not resolve.
int start_connect(const PeerAddress& p) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(p.host.c_str(), std::to_string(p.port).c_str(), &hints, &found) != 0 || !found) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    ::freeaddrinfo(found);
    return errno == ECONNREFUSED ? -2 : -3;
  }
  ::freeaddrinfo(found);
  return fd;
}

}  // namespace

const char* reach_name(Reach r) {
  switch (r) {
    case Reach::yes: return "yes";
    case Reach::refused: return "refused";
    case Reach::silent: return "silent";
    case Reach::unknown: return "unknown";
  }
  return "unknown";
}

PeerListener::PeerListener() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof addr;
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, 128) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    return;
  }
  port_ = ntohs(addr.sin_port);
}

PeerListener::~PeerListener() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<PeerAddress> gather_peer_addresses(const Comm& world, const std::vector<std::string>& hosts,
                                               const PeerListener& listener) {
  const auto ports = all_gather_value<int32_t>(world, listener.port());
  std::vector<PeerAddress> out;
  for (size_t r = 0; r < hosts.size(); ++r) out.push_back({hosts[r], ports[r]});
  return out;
}

std::vector<Reach> probe_peers(const std::vector<PeerAddress>& peers, int self, double timeout_s) {
  std::vector<Reach> out(peers.size(), Reach::unknown);
  std::vector<pollfd> fds;
  std::vector<size_t> who;
  for (size_t r = 0; r < peers.size(); ++r) {
    if (static_cast<int>(r) == self || peers[r].port == 0) continue;
    const int fd = start_connect(peers[r]);
    if (fd == -2) out[r] = Reach::refused;
    if (fd == -3) out[r] = Reach::silent;
    if (fd < 0) continue;
    fds.push_back({fd, POLLOUT, 0});
    who.push_back(r);
    out[r] = Reach::silent;  // until its connection completes
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  size_t open = fds.size();
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(fds.data(), fds.size(), static_cast<int>(left.count())) <= 0) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(fds[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
      out[who[i]] = err == 0 ? Reach::yes : err == ECONNREFUSED ? Reach::refused : Reach::silent;
      ::close(fds[i].fd);
      fds[i].fd = -1;
      --open;
    }
  }
  for (const pollfd& p : fds)
    if (p.fd >= 0) ::close(p.fd);
  return out;
}

}  // namespace megatrain
