//===- PeerSocket.cpp - Has the client of a waiting request gone away? ----===//
#include "PeerSocket.h"

#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

namespace llmc::serve {
namespace {

int portOf(const sockaddr_storage &a) {
  if (a.ss_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in &>(a).sin_port);
  if (a.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6 &>(a).sin6_port);
  return -1;
}

/// Whether socket `fd` has exactly these two ends.
bool hasEnds(int fd, int local_port, const std::string &remote_addr, int remote_port) {
  sockaddr_storage local{}, peer{};
  socklen_t ll = sizeof local, pl = sizeof peer;
  if (getsockname(fd, reinterpret_cast<sockaddr *>(&local), &ll) != 0 ||
      portOf(local) != local_port)
    return false;
  if (getpeername(fd, reinterpret_cast<sockaddr *>(&peer), &pl) != 0 ||
      portOf(peer) != remote_port)
    return false;
  char host[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<sockaddr *>(&peer), pl, host, sizeof host, nullptr, 0,
                  NI_NUMERICHOST) != 0)
    return false;
  return remote_addr == host;
}

} // namespace

int findConnectionSocket(int local_port, const std::string &remote_addr, int remote_port) {
  if (local_port <= 0 || remote_port <= 0 || remote_addr.empty())
    return -1;
  DIR *dir = opendir("/proc/self/fd");
  if (!dir)
    return -1;
  int found = -1;
  while (const dirent *e = readdir(dir)) {
    char *end = nullptr;
    const long fd = strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd < 0 || fd == dirfd(dir))
      continue;
    struct stat st;
    if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode))
      continue;
    if (hasEnds(int(fd), local_port, remote_addr, remote_port)) {
      found = int(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool peerClosed(int fd) {
  if (fd < 0)
    return false;
  pollfd p{fd, short(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0)
    return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL))
    return true;
  char c;
  return recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0; // end of stream
}

} // namespace llmc::serve
