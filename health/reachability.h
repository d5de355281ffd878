// Whether the ranks can still reach each other, asked outside MPI (a hung collective cannot say
// which link failed). Every rank keeps a listening TCP socket open for its whole run; the kernel
// completes connections to it without the process doing anything, so a peer is reachable while its
// host is up and the network between the two carries packets. When the watchdog fires it tries a
// connection to every peer at once (health/watchdog.h) and records the result in its dump, so that
// `megatrain diagnose` can name a host the others cannot reach (a link down, a host gone).
#pragma once
#include <string>
#include <vector>

#include "parallel/comm.h"

namespace megatrain {

struct PeerAddress {
  std::string host;  // as the peer names itself (gethostname), resolved through the resolver
  int port = 0;      // 0: the peer has no listener
};

class PeerListener {
 public:
  PeerListener();  // a socket on an ephemeral port of every address; port() 0 when none could be opened
  ~PeerListener();
  PeerListener(const PeerListener&) = delete;
  PeerListener& operator=(const PeerListener&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1, port_ = 0;
};

// Collective over `world`: every rank's address (its host from `hosts`, every rank's, and its
// listener's port), indexed by rank.
std::vector<PeerAddress> gather_peer_addresses(const Comm& world, const std::vector<std::string>& hosts,
                                               const PeerListener& listener);

// yes: connected. refused: the host answered that nobody listens (the rank is gone, its host is up).
// silent: no answer before the deadline, or no route (the network or the host is down). unknown: the
// peer has no listener, or its host name does not resolve.
enum class Reach : uint8_t { yes, refused, silent, unknown };
const char* reach_name(Reach r);

// Connects to every peer but `self` at once and waits at most `timeout_s` for the connections.
std::vector<Reach> probe_peers(const std::vector<PeerAddress>& peers, int self, double timeout_s);

}  // namespace megatrain
