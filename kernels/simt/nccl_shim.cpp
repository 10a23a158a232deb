// The NCCL functions ember calls, for the SIMT flavour (compiled only there: with a real GPU the
// real libnccl is linked instead). The ranks are host threads of ONE process, each with its own
// emulated device (cudaSetDevice before ncclCommInitRank); there is no network and no second
// process.
//
// Declarations come from the real <nccl.h>, so a call site that compiles here compiles against
// NCCL. Each function checks its arguments the way NCCL does (src/misc/argcheck.cc: comm, root,
// data type, reduction op, then the buffers; ncclCommEnsureReady before use) and returns the
// status NCCL would return, printing an "NCCL WARN <what>" line on stderr that
// ncclGetLastError() then returns. It is stricter than NCCL where NCCL would hang or corrupt
// memory: buffers must be device memory of the communicator's device for their whole extent, and
// ranks that call different collectives in the same position fail instead of deadlocking.
//
// Supported: ncclGetVersion, ncclGetUniqueId, ncclCommInitRank[Config] (blocking and
// non-blocking), ncclCommFinalize/Destroy/Abort, ncclCommGetAsyncError, ncclGetErrorString,
// ncclGetLastError, ncclCommCount/CuDevice/UserRank, and the collectives ncclAllReduce,
// ncclBroadcast and ncclAllGather on int8/uint8/int32/uint32/int64/uint64/f16/f32/f64/bf16 with
// sum, prod, max, min and avg. Not defined at all (a call fails to link rather than misbehave):
// groups (ncclGroupStart/End: one thread driving several ranks would deadlock here), point-to-point,
// the other collectives, user reduction ops, splitting, buffer registration and the fp8 types.
// The arithmetic (data types, reduction ops, rank-order reduction) is in nccl_reduce.cpp.
//
// Note [Cliques and rounds]
// A ncclUniqueId names a clique: the state its ranks share, guarded by one mutex and one condition
// variable. ncclCommInitRank joins it; a communicator is ready once all nranks have joined. Each
// collective a communicator issues takes the next number of its own sequence (0, 1, 2, ...), its
// "round" (WARN lines count from 1: "ncclAllReduce #1" is the first collective). Every rank posts
// its call (kind, count, type, op, root, buffers) to the clique's round of that number. A post that
// differs from the round's first post fails the round for every rank (ncclInvalidUsage: real NCCL
// would hang or mix data). The LAST rank to post computes the result in rank order (rank 0, then
// 1, ...: deterministic and bit-identical every run) from snapshots of every send buffer, so
// in-place calls are safe; writes every rank's receive buffer directly (device memory is host
// memory here); and marks the round done, waking the waiters. A blocking communicator waits for
// its round inside the call. A non-blocking one returns ncclInProgress and ncclCommGetAsyncError
// reports ncclInProgress until the round is done, then its result; as in NCCL, using the
// communicator before that is an error, so each communicator has at most one round open.
//
// A rank leaves with ncclCommAbort or ncclCommDestroy (the same here: nothing runs
// asynchronously that Destroy could wait for). Every round still open then fails with
// ncclRemoteError, and so does every later post of its peers: nobody waits for a rank that can
// never come. A rank that merely stops calling is waited for forever, as on a GPU; the shim has no
// timeouts, its callers poll ncclCommGetAsyncError and abort.
//
// Errors are sticky, as NCCL's asynchronous errors are: after a collective failed, every use of the
// communicator returns that error until it is aborted. Argument errors are not: the call returns
// before posting anything, so the ranks' sequences stay aligned.
//
// Locks: registry().mu guards the handle and clique tables; it is never held while waiting nor
// together with a clique's mutex. A clique's mutex guards the clique and the mutable fields of its
// communicators. The emulator's own functions (stream lookups and synchronization, pointer
// lookups) are called with no shim lock held, so the shim never blocks inside the emulator's locks.
//
// Note [Collectives outside the stream order]
// Like the cuBLAS shim, the shim computes on the host, not as work on the stream: a collective
// first synchronizes its stream (with EMBER_SIMT_DEFER=1 this runs the queued work, including
// other streams' work up to the events the stream waits on), so it sees everything issued before
// it; and the receive buffers hold the result before the call returns ncclSuccess (or before
// ncclCommGetAsyncError reports ncclSuccess), so everything issued after sees it. What this cannot
// show is the overlap of a collective with later work on other streams.

#include "nccl_shim.h"

#include <nccl.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "internal.h"
#include "shim_memory.h"

namespace {

namespace nccl = ember::simt::detail::nccl;

// ---- messages ---------------------------------------------------------------------------------

// The calling thread's last WARN text. NCCL keeps one process-wide string and ignores
// ncclGetLastError's comm argument; with ranks as threads of one process a global would mix the
// ranks' errors, so the shim keeps one per thread.
thread_local std::string tls_last_error;

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  char buf[1024];
  std::vsnprintf(buf, sizeof buf, fmt, args);
  va_end(args);
  return buf;
}

// Prints "NCCL WARN <message>" (always: the real library only does with NCCL_DEBUG=WARN), keeps
// it for ncclGetLastError and returns r.
ncclResult_t warn(ncclResult_t r, const std::string& message) {
  tls_last_error = message;
  std::fprintf(stderr, "NCCL WARN %s\n", message.c_str());
  return r;
}

const char* result_name(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "unknown result";
  }
}

// ---- cliques, rounds and communicators (Note [Cliques and rounds]) -------------------------------

enum class Coll : uint8_t { AllReduce, Broadcast, AllGather };

const char* coll_name(Coll c) {
  switch (c) {
    case Coll::AllReduce: return "ncclAllReduce";
    case Coll::Broadcast: return "ncclBroadcast";
    case Coll::AllGather: return "ncclAllGather";
  }
  return "?";
}

// One rank's call of one collective.
struct Post {
  Coll coll = Coll::AllReduce;
  size_t count = 0;  // elements per rank: AllReduce and Broadcast count, AllGather sendcount
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t op = ncclSum;    // AllReduce only
  int root = 0;                // Broadcast only
  const void* send = nullptr;  // null for a Broadcast's non-root ranks (NCCL does not read it)
  void* recv = nullptr;
};

bool same_call(const Post& a, const Post& b) {
  return a.coll == b.coll && a.count == b.count && a.type == b.type && a.op == b.op && a.root == b.root;
}

std::string describe(const Post& p) {
  switch (p.coll) {
    case Coll::AllReduce:
      return format("ncclAllReduce(count %zu, %s, %s)", p.count, nccl::type_name(p.type), nccl::op_name(p.op));
    case Coll::Broadcast:
      return format("ncclBroadcast(count %zu, %s, root %d)", p.count, nccl::type_name(p.type), p.root);
    case Coll::AllGather: return format("ncclAllGather(sendcount %zu, %s)", p.count, nccl::type_name(p.type));
  }
  return "?";
}

// One position in the ranks' common sequence of collectives.
struct Round {
  uint64_t number = 0;
  std::vector<Post> posts;   // by rank
  std::vector<char> posted;  // by rank
  int nposted = 0;
  int first = -1;  // the rank that posted first: every other post must match its call
  bool done = false;
  ncclResult_t result = ncclSuccess;
  std::string message;  // why it failed

  std::string label() const { return format("%s #%llu", coll_name(posts[first].coll), (unsigned long long)number + 1); }
  void fail(ncclResult_t r, std::string why) {
    done = true;
    result = r;
    message = std::move(why);
  }
};

struct Clique {
  uint64_t id = 0;
  std::mutex mu;
  std::condition_variable cv;  // any change below
  // Initialization: nranks comes from the first rank to join; device[r] is -1 until rank r joined.
  int nranks = 0;
  std::vector<int> device;
  int joined = 0;
  // A join with bad arguments fails the whole initialization, so that the ranks already waiting
  // for the clique to fill up do not wait forever.
  ncclResult_t init_error = ncclSuccess;
  std::string init_message;
  // The first rank that left (ncclCommAbort / ncclCommDestroy), and how.
  int left_rank = -1;
  const char* left_by = "";
  int handles_freed = 0;
  std::map<uint64_t, std::shared_ptr<Round>> rounds;  // rounds not every rank has posted to yet

  bool ready() const { return nranks > 0 && joined == nranks; }
  std::string left_before(const char* what) const {
    return format("rank %d left the communicator (%s) before joining %s", left_rank, left_by, what);
  }
  std::string left_during_init() const {
    return format("rank %d left the communicator (%s) before all %d ranks had joined", left_rank, left_by, nranks);
  }
};

}  // namespace

// The handle behind ncclComm_t.
struct ncclComm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
  int nranks = 0;
  int device = 0;
  bool blocking = true;
  // Guarded by clique->mu.
  uint64_t next_round = 0;
  std::shared_ptr<Round> pending;    // a non-blocking collective not yet seen done
  ncclResult_t error = ncclSuccess;  // sticky, like NCCL's asynchronous error
  std::string error_message;
  bool finalized = false;
  bool freed = false;  // by ncclCommAbort/Destroy, while another thread of the rank was inside a call
};

namespace {

// The live handles (a freed or made-up handle is ncclInvalidArgument instead of a use-after-free)
// and the cliques by id. A call holds its own reference to the communicator, so a concurrent
// ncclCommAbort from another thread frees the handle without pulling the object from under it.
struct Registry {
  std::mutex mu;
  std::unordered_map<const ncclComm*, std::shared_ptr<ncclComm>> comms;
  std::unordered_map<uint64_t, std::shared_ptr<Clique>> cliques;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: ranks may still call while the process exits
  return *r;
}

std::shared_ptr<ncclComm> live(const ncclComm* handle) {
  std::lock_guard<std::mutex> lock(registry().mu);
  auto it = registry().comms.find(handle);
  return it == registry().comms.end() ? nullptr : it->second;
}

// The communicator behind a handle, or null after a WARN (*r set to ncclInvalidArgument).
std::shared_ptr<ncclComm> checked(const char* fn, const ncclComm* handle, ncclResult_t* r) {
  if (handle == nullptr) {
    *r = warn(ncclInvalidArgument, format("%s : comm argument is NULL", fn));
    return nullptr;
  }
  std::shared_ptr<ncclComm> c = live(handle);
  if (c == nullptr)
    *r = warn(ncclInvalidArgument, format("%s : comm %p is not a live communicator (never created, or freed by "
                                          "ncclCommDestroy/ncclCommAbort)",
                                          fn, static_cast<const void*>(handle)));
  return c;
}

// ---- unique ids ---------------------------------------------------------------------------------
// Layout of the 128 bytes: magic (8), the creating process's pid (8), the clique number (8), zeros.

constexpr uint64_t kIdMagic = 0x6c63636e74726d65ull;  // "emrtnccl"
std::atomic<uint64_t> next_clique{1};

struct IdFields {
  uint64_t magic;
  uint64_t pid;
  uint64_t clique;
};

ncclResult_t decode_id(const char* fn, const ncclUniqueId& id, uint64_t* clique) {
  IdFields f;
  std::memcpy(&f, id.internal, sizeof f);
  bool zeros = true;
  for (size_t i = sizeof f; i < sizeof id.internal; ++i) zeros = zeros && id.internal[i] == 0;
  if (f.magic != kIdMagic || !zeros || f.clique == 0 || f.clique >= next_clique.load())
    return warn(ncclInvalidUsage, format("%s : the ncclUniqueId does not come from ncclGetUniqueId", fn));
  const auto self = static_cast<uint64_t>(getpid());
  if (f.pid != self)
    return warn(ncclInvalidUsage,
                format("%s : the ncclUniqueId was made by process %llu, this is process %llu: the SIMT NCCL shim "
                       "joins threads of one process only",
                       fn, (unsigned long long)f.pid, (unsigned long long)self));
  *clique = f.clique;
  return ncclSuccess;
}

std::shared_ptr<Clique> find_or_create_clique(uint64_t id) {
  std::lock_guard<std::mutex> lock(registry().mu);
  std::shared_ptr<Clique>& q = registry().cliques[id];
  if (q == nullptr) {
    q = std::make_shared<Clique>();
    q->id = id;
  }
  return q;
}

// ---- communicator state -------------------------------------------------------------------------

ncclResult_t set_error(ncclComm& c, ncclResult_t r, const std::string& message) {
  c.error = r;
  c.error_message = message;
  return warn(r, message);
}

// What ncclCommGetAsyncError reports: ncclInProgress while the initialization or a non-blocking
// collective is unfinished, then ncclSuccess or the (sticky) error, printed when first seen.
// Caller holds c.clique->mu.
ncclResult_t state_locked(ncclComm& c) {
  if (c.error != ncclSuccess) return c.error;
  const Clique& q = *c.clique;
  if (!q.ready()) {
    if (q.init_error != ncclSuccess) return set_error(c, q.init_error, q.init_message);
    if (q.left_rank >= 0) return set_error(c, ncclRemoteError, q.left_during_init());
    return ncclInProgress;
  }
  if (c.pending) {
    if (!c.pending->done) return ncclInProgress;
    const std::shared_ptr<Round> r = std::move(c.pending);
    if (r->result != ncclSuccess) return set_error(c, r->result, r->message);
  }
  return ncclSuccess;
}

// What a call is about to do with the communicator: only collectives are refused after
// ncclCommFinalize.
enum class Use : uint8_t { Query, Collective };

// NCCL's ncclCommEnsureReady: a communicator whose previous operation has not returned
// ncclSuccess yet may not be used (ncclInvalidArgument); one in error returns its error.
// Caller holds c.clique->mu.
ncclResult_t ensure_ready_locked(const char* fn, ncclComm& c, Use use) {
  if (c.freed)
    return warn(ncclInvalidArgument,
                format("%s : the communicator was freed (ncclCommAbort/ncclCommDestroy) during the call", fn));
  const ncclResult_t s = state_locked(c);
  if (s == ncclInProgress)
    return warn(ncclInvalidArgument,
                format("%s : attempt to use communicator before the previous operation returned ncclSuccess "
                       "(%s still in progress; poll ncclCommGetAsyncError)",
                       fn, c.pending ? c.pending->label().c_str() : "ncclCommInitRank"));
  if (s != ncclSuccess)
    return warn(s, format("%s : the communicator failed earlier (%s: %s); abort it", fn, result_name(s),
                          c.error_message.c_str()));
  if (use == Use::Collective && c.finalized)
    return warn(ncclInvalidUsage, format("%s : the communicator was finalized (ncclCommFinalize)", fn));
  return ncclSuccess;
}

ncclResult_t ensure_ready(const char* fn, ncclComm& c, Use use) {
  std::lock_guard<std::mutex> lock(c.clique->mu);
  return ensure_ready_locked(fn, c, use);
}

// ncclCommCount, ncclCommCuDevice, ncclCommUserRank: one int of a live, ready communicator.
// `arg` names the output parameter as NCCL's warning does.
template <class Get>
ncclResult_t query(const char* fn, const ncclComm* handle, int* out, const char* arg, Get get) {
  ncclResult_t r = ncclSuccess;
  const std::shared_ptr<ncclComm> c = checked(fn, handle, &r);
  if (c == nullptr) return r;
  if (out == nullptr) return warn(ncclInvalidArgument, format("%s : %s argument is NULL", fn, arg));
  if ((r = ensure_ready(fn, *c, Use::Query)) != ncclSuccess) return r;
  *out = get(*c);
  return ncclSuccess;
}

// ncclCommAbort and ncclCommDestroy: the rank leaves its clique (Note [Cliques and rounds]).
ncclResult_t leave(const char* fn, ncclComm_t handle) {
  if (handle == nullptr) return ncclSuccess;  // as in NCCL
  std::shared_ptr<ncclComm> c;
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    auto it = registry().comms.find(handle);
    if (it != registry().comms.end()) {
      c = std::move(it->second);
      registry().comms.erase(it);
    }
  }
  if (c == nullptr)
    return warn(ncclInvalidArgument, format("%s : comm %p is not a live communicator (never created, or already "
                                            "freed by ncclCommDestroy/ncclCommAbort)",
                                            fn, static_cast<const void*>(handle)));
  Clique& q = *c->clique;
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(q.mu);
    c->freed = true;
    if (q.left_rank < 0) {
      q.left_rank = c->rank;
      q.left_by = fn;
    }
    for (auto& [number, r] : q.rounds) {
      if (r->done) continue;
      r->fail(ncclRemoteError, format("rank %d left the communicator (%s) %s %s", c->rank, fn,
                                      r->posted[c->rank] ? "during" : "before joining", r->label().c_str()));
    }
    q.cv.notify_all();  // blocking waiters of every rank, this one's included
    last = q.ready() && ++q.handles_freed == q.nranks;
  }
  // The last handle of a complete clique: nobody can join or post any more. (A clique whose
  // initialization never completed stays registered, a few hundred bytes, so that a rank joining
  // late still learns that a peer left instead of waiting forever.)
  if (last) {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().cliques.erase(q.id);
  }
  return ncclSuccess;
}

// ---- initialization ---------------------------------------------------------------------------

ncclResult_t check_config(const char* fn, const ncclConfig_t* config, bool* blocking) {
  *blocking = true;  // NCCL's default (NCCL_COMM_BLOCKING unset)
  if (config == nullptr) return ncclSuccess;
  if (config->magic != 0xcafebeef || config->version < NCCL_VERSION(2, 14, 0) || config->version > NCCL_VERSION_CODE ||
      config->size < offsetof(ncclConfig_t, blocking) + sizeof(int) || config->size > sizeof(ncclConfig_t))
    return warn(ncclInvalidArgument, format("%s : ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER "
                                            "(size %zu, magic 0x%x, version %u)",
                                            fn, config->size, config->magic, config->version));
  if (config->blocking == NCCL_CONFIG_UNDEF_INT) return ncclSuccess;
  if (config->blocking != 0 && config->blocking != 1)
    return warn(ncclInvalidArgument, format("%s : invalid config blocking attribute value %d", fn, config->blocking));
  *blocking = config->blocking == 1;
  return ncclSuccess;
}

ncclResult_t init_rank(const char* fn, ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank,
                       const ncclConfig_t* config) {
  if (out == nullptr) return warn(ncclInvalidArgument, format("%s : newcomm argument is NULL", fn));
  *out = nullptr;
  bool blocking = true;
  if (const ncclResult_t r = check_config(fn, config, &blocking)) return r;
  uint64_t clique_id = 0;
  if (const ncclResult_t r = decode_id(fn, id, &clique_id)) return r;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return warn(ncclUnhandledCudaError, format("%s : cudaGetDevice failed", fn));

  std::shared_ptr<Clique> clique = find_or_create_clique(clique_id);
  Clique& q = *clique;
  std::unique_lock<std::mutex> lock(q.mu);
  if (q.init_error != ncclSuccess)
    return warn(q.init_error, format("%s : the communicator's initialization failed: %s", fn, q.init_message.c_str()));
  if (q.left_rank >= 0 && !q.ready()) return warn(ncclRemoteError, format("%s : %s", fn, q.left_during_init().c_str()));

  // The checks NCCL makes when the ranks exchange their information, made at each join instead.
  ncclResult_t bad = ncclSuccess;
  std::string why;
  if (nranks < 1) {
    bad = ncclInvalidArgument;
    why = format("invalid device count (%d) requested", nranks);
  } else if (rank < 0 || rank >= nranks) {
    bad = ncclInvalidArgument;
    why = format("rank %d is outside [0, %d)", rank, nranks);
  } else if (q.nranks != 0 && nranks != q.nranks) {
    bad = ncclInvalidArgument;
    why = format("rank %d joined with nranks %d but an earlier rank with nranks %d", rank, nranks, q.nranks);
  } else if (q.nranks != 0 && q.device[static_cast<size_t>(rank)] >= 0) {
    bad = ncclInvalidArgument;
    why = format("rank %d joined twice", rank);
  } else {
    for (int r = 0; r < q.nranks && bad == ncclSuccess; ++r) {
      if (q.device[static_cast<size_t>(r)] != device) continue;
      bad = ncclInvalidUsage;
      why = format("Duplicate GPU detected: rank %d and rank %d both on CUDA device %d", rank, r, device);
    }
  }
  if (bad != ncclSuccess) {
    if (!q.ready()) {  // the ranks waiting for this clique to fill up would wait forever
      q.init_error = bad;
      q.init_message = why;
      q.cv.notify_all();
    }
    return warn(bad, format("%s : %s", fn, why.c_str()));
  }

  if (q.nranks == 0) {
    q.nranks = nranks;
    q.device.assign(static_cast<size_t>(nranks), -1);
  }
  q.device[static_cast<size_t>(rank)] = device;
  ++q.joined;
  q.cv.notify_all();

  auto c = std::make_shared<ncclComm>();
  c->clique = clique;
  c->rank = rank;
  c->nranks = nranks;
  c->device = device;
  c->blocking = blocking;
  if (blocking) {
    q.cv.wait(lock, [&] { return q.ready() || q.init_error != ncclSuccess || q.left_rank >= 0; });
    if (!q.ready()) {
      if (q.init_error != ncclSuccess)
        return warn(q.init_error,
                    format("%s : the communicator's initialization failed: %s", fn, q.init_message.c_str()));
      return warn(ncclRemoteError, format("%s : %s", fn, q.left_during_init().c_str()));
    }
  }
  lock.unlock();
  {
    std::lock_guard<std::mutex> reg(registry().mu);
    registry().comms.emplace(c.get(), c);
  }
  *out = c.get();
  return blocking ? ncclSuccess : ncclInProgress;
}

// ---- collectives --------------------------------------------------------------------------------

// Runs the rest of a call on the communicator's device, as NCCL does (cudaSetDevice(comm->cudaDev)),
// so that stream 0 and cudaStreamPerThread mean that device's streams; restores the caller's.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    (void)cudaGetDevice(&saved_);
    (void)cudaSetDevice(device);
  }
  ~DeviceGuard() { (void)cudaSetDevice(saved_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int saved_ = 0;
};

// NCCL's CudaPtrCheck, stricter: [p, p + bytes) must lie inside one cudaMalloc allocation of the
// communicator's device (NCCL looks at the first byte only, and only with NCCL_CHECK_POINTERS=1).
ncclResult_t check_buffer(const char* fn, const char* name, const void* p, size_t bytes, int device) {
  if (p == nullptr) return warn(ncclInvalidArgument, format("%s : %s argument is NULL", fn, name));
  ember::simt::detail::Allocation a;
  if (!ember::simt::detail::find_allocation(p, false, &a) || a.kind != ember::simt::detail::MemoryKind::Device)
    return warn(ncclInvalidArgument, format("%s : %s %p is not device memory (cudaMalloc)", fn, name, p));
  if (a.device != device)
    return warn(ncclInvalidArgument, format("%s : %s %p is memory of device %d but the communicator's device is %d", fn,
                                            name, p, a.device, device));
  if (reinterpret_cast<uintptr_t>(p) + bytes > a.base + a.size)
    return warn(ncclInvalidArgument, format("%s : %s %p: %zu bytes run past the end of its %zu-byte allocation", fn,
                                            name, p, bytes, a.size));
  return ncclSuccess;
}

// The last rank to post runs the round, with every rank's buffers (Note [Cliques and rounds]):
// the result is computed from the send buffers completely before any receive buffer is written.
void execute(const Round& r, int nranks) {
  const Post& call = r.posts[static_cast<size_t>(r.first)];
  const size_t bytes = call.count * nccl::type_size(call.type);
  std::vector<unsigned char> result;
  switch (call.coll) {
    case Coll::AllReduce: {
      std::vector<const void*> send;
      for (const Post& p : r.posts) send.push_back(p.send);
      result.resize(bytes);
      nccl::reduce(call.type, call.op, send.data(), nranks, call.count, result.data());
      break;
    }
    case Coll::Broadcast: {
      const auto* src = static_cast<const unsigned char*>(r.posts[static_cast<size_t>(call.root)].send);
      result.assign(src, src + bytes);
      break;
    }
    case Coll::AllGather:
      for (const Post& p : r.posts) {
        const auto* src = static_cast<const unsigned char*>(p.send);
        result.insert(result.end(), src, src + bytes);
      }
      break;
  }
  for (const Post& p : r.posts) std::memcpy(p.recv, result.data(), result.size());
}

// Posts this rank's call to its next round and, for a blocking communicator, waits for the round.
ncclResult_t post(const char* fn, ncclComm& c, const Post& p) {
  Clique& q = *c.clique;
  std::unique_lock<std::mutex> lock(q.mu);
  // Checked again under the lock: another thread may have used or aborted the communicator since.
  if (const ncclResult_t r = ensure_ready_locked(fn, c, Use::Collective)) return r;

  const uint64_t number = c.next_round++;
  std::shared_ptr<Round> round;
  if (auto it = q.rounds.find(number); it != q.rounds.end()) {
    round = it->second;
  } else if (q.left_rank >= 0) {
    const std::string what = format("%s #%llu", coll_name(p.coll), (unsigned long long)number + 1);
    return set_error(c, ncclRemoteError, q.left_before(what.c_str()));
  } else {
    round = std::make_shared<Round>();
    round->number = number;
    round->posts.resize(static_cast<size_t>(c.nranks));
    round->posted.assign(static_cast<size_t>(c.nranks), 0);
    q.rounds.emplace(number, round);
  }
  Round& r = *round;
  r.posts[static_cast<size_t>(c.rank)] = p;
  r.posted[static_cast<size_t>(c.rank)] = 1;
  ++r.nposted;
  if (!r.done) {
    if (r.first < 0) r.first = c.rank;
    const Post& first = r.posts[static_cast<size_t>(r.first)];
    if (!same_call(p, first)) {
      r.fail(ncclInvalidUsage,
             format("collective #%llu differs between ranks: rank %d called %s but rank %d called %s (every rank "
                    "must call the same collectives in the same order)",
                    (unsigned long long)number + 1, c.rank, describe(p).c_str(), r.first, describe(first).c_str()));
    } else if (r.nposted == c.nranks) {
      execute(r, c.nranks);
      r.done = true;
    }
    if (r.done) q.cv.notify_all();
  }
  if (r.nposted == c.nranks) q.rounds.erase(number);

  if (c.blocking) {
    q.cv.wait(lock, [&] { return r.done; });
  } else if (!r.done) {
    c.pending = round;
    return ncclInProgress;
  }
  if (r.result != ncclSuccess) return set_error(c, r.result, r.message);
  return ncclSuccess;
}

// Every collective: the checks, in NCCL's order, then the stream, then the post.
ncclResult_t collective(const char* fn, Post p, ncclComm_t handle, cudaStream_t stream) {
  ncclResult_t r = ncclSuccess;
  const std::shared_ptr<ncclComm> c = checked(fn, handle, &r);
  if (c == nullptr) return r;
  if ((r = ensure_ready(fn, *c, Use::Collective)) != ncclSuccess) return r;
  if (p.coll == Coll::Broadcast && (p.root < 0 || p.root >= c->nranks))
    return warn(ncclInvalidArgument,
                format("%s : invalid root %d (root should be in the 0..%d range)", fn, p.root, c->nranks - 1));
  if (static_cast<int>(p.type) < 0 || p.type >= ncclNumTypes)
    return warn(ncclInvalidArgument, format("%s : invalid type %d", fn, static_cast<int>(p.type)));
  const size_t elem = nccl::type_size(p.type);
  if (elem == 0)
    return warn(ncclInvalidArgument,
                format("%s : %s is not supported by the SIMT NCCL shim", fn, nccl::type_name(p.type)));
  if (p.coll == Coll::AllReduce && (static_cast<int>(p.op) < 0 || p.op >= ncclNumOps))
    return warn(ncclInvalidArgument, format("%s : invalid reduction operation %d (the SIMT NCCL shim has no user ops)",
                                            fn, static_cast<int>(p.op)));
  const size_t gathered = p.coll == Coll::AllGather ? static_cast<size_t>(c->nranks) : 1;
  if (p.count > SIZE_MAX / elem / gathered)
    return warn(ncclInvalidArgument, format("%s : count %zu overflows the buffer size", fn, p.count));
  const size_t bytes = p.count * elem;
  if (p.coll != Coll::AllReduce) p.op = ncclSum;
  if (p.coll != Coll::Broadcast) p.root = 0;

  const DeviceGuard on_device(c->device);
  cudaError_t e = cudaSuccess;
  const CUstream_st* s = ember::simt::detail::resolve_stream(stream, &e);
  if (s == nullptr)
    return warn(ncclInvalidArgument, format("%s : stream %p is not a live stream (never created, or destroyed)", fn,
                                            static_cast<const void*>(stream)));
  if (ember::simt::detail::stream_device(s) != c->device)
    return warn(ncclInvalidArgument,
                format("%s : stream %p belongs to device %d but the communicator's device is %d", fn,
                       static_cast<const void*>(stream), ember::simt::detail::stream_device(s), c->device));
  if (p.count == 0) return ncclSuccess;  // NCCL drops empty collectives: no round, nothing to wait for

  const bool root = p.coll != Coll::Broadcast || c->rank == p.root;
  if (!root) {
    p.send = nullptr;
  } else if ((r = check_buffer(fn, "sendbuff", p.send, bytes, c->device)) != ncclSuccess) {
    return r;
  }
  if ((r = check_buffer(fn, "recvbuff", p.recv, bytes * gathered, c->device)) != ncclSuccess) return r;

  // Note [Collectives outside the stream order].
  if (ember::simt::synchronize_stream(stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return warn(ncclUnhandledCudaError, format("%s : cudaStreamSynchronize failed", fn));
  }
  return post(fn, *c, p);
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return warn(ncclInvalidArgument, "ncclGetVersion : version argument is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  if (unique_id == nullptr) return warn(ncclInvalidArgument, "ncclGetUniqueId : uniqueId argument is NULL");
  *unique_id = ncclUniqueId{};
  const IdFields f{kIdMagic, static_cast<uint64_t>(getpid()), next_clique.fetch_add(1)};
  std::memcpy(unique_id->internal, &f, sizeof f);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  return init_rank("ncclCommInitRankConfig", comm, nranks, commId, rank, config);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank("ncclCommInitRank", comm, nranks, commId, rank, nullptr);
}

// Nothing is in flight once the communicator is ready (for a non-blocking one: once
// ncclCommGetAsyncError said ncclSuccess), so there is nothing to flush.
ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  ncclResult_t r = ncclSuccess;
  const std::shared_ptr<ncclComm> c = checked("ncclCommFinalize", comm, &r);
  if (c == nullptr) return r;
  std::lock_guard<std::mutex> lock(c->clique->mu);
  if ((r = ensure_ready_locked("ncclCommFinalize", *c, Use::Query)) != ncclSuccess) return r;
  c->finalized = true;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) { return leave("ncclCommDestroy", comm); }

ncclResult_t ncclCommAbort(ncclComm_t comm) { return leave("ncclCommAbort", comm); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  ncclResult_t r = ncclSuccess;
  const std::shared_ptr<ncclComm> c = checked("ncclCommGetAsyncError", comm, &r);
  if (c == nullptr) return r;
  if (asyncError == nullptr) return warn(ncclInvalidArgument, "ncclCommGetAsyncError : asyncError argument is NULL");
  std::lock_guard<std::mutex> lock(c->clique->mu);
  *asyncError = state_locked(*c);
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return tls_last_error.c_str(); }

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return query("ncclCommCount", comm, count, "count", [](const ncclComm& c) { return c.nranks; });
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return query("ncclCommCuDevice", comm, device, "devid", [](const ncclComm& c) { return c.device; });
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return query("ncclCommUserRank", comm, rank, "rank", [](const ncclComm& c) { return c.rank; });
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  Post p;
  p.coll = Coll::AllReduce;
  p.count = count;
  p.type = datatype;
  p.op = op;
  p.send = sendbuff;
  p.recv = recvbuff;
  return collective("ncclAllReduce", p, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  Post p;
  p.coll = Coll::Broadcast;
  p.count = count;
  p.type = datatype;
  p.root = root;
  p.send = sendbuff;
  p.recv = recvbuff;
  return collective("ncclBroadcast", p, comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  Post p;
  p.coll = Coll::AllGather;
  p.count = sendcount;
  p.type = datatype;
  p.send = sendbuff;
  p.recv = recvbuff;
  return collective("ncclAllGather", p, comm, stream);
}

}  // extern "C"
