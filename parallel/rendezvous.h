#pragma once
// Rendezvous: rank 0's small blob (the NCCL communicator's ncclUniqueId, 128 bytes) on every rank
// of a job that was not started by MPI — a torchrun-style launch (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT) or any launcher plus a shared file system.
//
//   const LaunchInfo li = detect_launch();
//   std::vector<uint8_t> id = rendezvous_broadcast(li, "nccl-id", rank0_id_bytes, std::chrono::seconds(300));
//
// Under mpirun/srun the NCCL communicator sends its id with MPI_Bcast instead.
//
// Note [Rendezvous protocol]
// TCP. Rank 0 listens on master_port (all interfaces, IPv6 and IPv4); every other rank connects to
// master_addr:master_port, retrying while rank 0 is not up yet, and sends a hello:
//   "EMBERRDV" | version u32 | rank u32 | world_size u32 | key length u32 | key bytes
// Rank 0 answers "EMBERRDV" | status u32, then either (ok) payload length u64 | payload bytes, or
// (rejected) message length u32 | message, and the rank acknowledges with "EMBERACK" | rank u32.
// Integers are big-endian. Every socket is non-blocking and every wait is a poll() against the
// deadline, so nothing blocks forever.
// Rank 0 never fails because of one bad connection: a stranger (someone curl-ing the port, a rank
// of another job with another key or world size, a second connection claiming a rank that already
// connected) is told why it was rejected, when it speaks the protocol, and logged; rank 0 keeps
// waiting for the real ranks. The rejected side throws at once; rank 0, when the real ranks never
// come, throws at the deadline naming the ranks that never connected (or never acknowledged) and
// the rejected connections, which usually say what disagreed.
// File. Rank 0 writes the same fields ("EMBERRDF" | version | world_size | key | payload length |
// payload) to a temporary file and renames it to `path`; the others poll for it, check key and
// world size, and create "<path>.ack.<rank>". Rank 0 removes the file and the acks once all acks
// are there — and also when it fails, so a failed job does not leave a file that blocks the next.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "communicator.h"

namespace ember::parallel {

// The largest payload a rendezvous carries.
constexpr size_t kRendezvousMaxPayload = size_t{1} << 20;

// Rank 0's `payload` (ignored on other ranks; at most 1 MiB) on every rank of the job, by TCP:
// rank 0 listens on master_port (all interfaces), every other rank connects to
// master_addr:master_port (retrying until the deadline: rank 0 may start later) and receives the
// payload. `key` names what is exchanged ("nccl-id"): both sides must agree on key and world_size,
// and every rank 1..world_size-1 must connect exactly once; anything else is an ember::Error on
// the ranks involved naming the rank, the address and what disagreed (Note [Rendezvous protocol]).
// Rank 0 returns once every rank has received the payload (each one acknowledges), or throws on
// timeout naming the ranks that never connected. A world of one returns payload without any socket.
std::vector<uint8_t> tcp_broadcast_bytes(const std::string& master_addr, int master_port, int rank, int world_size,
                                         const std::string& key, const std::vector<uint8_t>& payload,
                                         std::chrono::milliseconds timeout);

// The same through a shared file system: rank 0 writes `path` atomically (temporary + rename), the
// others poll for it until the deadline and read it; the file carries key and world_size, checked
// like above. Rank 0 refuses to start if `path` exists (an earlier job's id would hang the new
// one), with an error saying to delete it. Each rank after reading creates "<path>.ack.<rank>";
// rank 0 waits for all acks (until the deadline) and then removes the file and the acks.
// The directory of `path` must exist.
std::vector<uint8_t> file_broadcast_bytes(const std::string& path, int rank, int world_size, const std::string& key,
                                          const std::vector<uint8_t>& payload, std::chrono::milliseconds timeout);

// Picks the transport from the environment: EMBER_RENDEZVOUS_FILE=<path> → file; else
// li.master_addr + li.master_port (MASTER_ADDR/MASTER_PORT; EMBER_RENDEZVOUS_PORT overrides the
// port — under torchrun itself MASTER_PORT is its own store's) → TCP; else an ember::Error naming the
// variables to set. Uses li.rank / li.world_size; a world of one needs no variable. `env` is for
// tests (default: std::getenv).
std::vector<uint8_t> rendezvous_broadcast(const LaunchInfo& li, const std::string& key,
                                          const std::vector<uint8_t>& payload, std::chrono::milliseconds timeout,
                                          const EnvLookup& env = {});

}  // namespace ember::parallel
