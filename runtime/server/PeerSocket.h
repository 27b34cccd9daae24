//===- PeerSocket.h - Has the client of a waiting request gone away? ------===//
// cpp-httplib 0.11 hands a handler no socket, so a handler that waits (a
// non-streamed completion) cannot see its client disconnect. These find
// the connection's socket among this process's descriptors by its two ends
// (the request's local port, remote address and port) and ask the kernel
// whether the peer has closed it.
//===----------------------------------------------------------------------===//
#pragma once

#include <string>

namespace llmc::serve {

/// The descriptor of this process's TCP socket whose local port is
/// `local_port` and whose peer is `remote_addr`:`remote_port` (numeric, as
/// httplib reports it), or -1 when there is none. Linux: reads /proc/self/fd.
int findConnectionSocket(int local_port, const std::string &remote_addr, int remote_port);

/// Whether the peer of connected socket `fd` has closed or reset its end:
/// end of stream or an error is pending. Bytes waiting to be read (a
/// pipelined request) are not a close. Never blocks, consumes nothing.
bool peerClosed(int fd);

} // namespace llmc::serve
