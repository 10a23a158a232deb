// NCCL ranks (nccl_communicator.h). Compiled in every build; the NCCL code only with EMBER_NCCL=1
// (a CUDA build that found NCCL, or the SIMT flavour with its shim).
// See Note [NCCL communicator: streams, order, timeouts] in nccl_communicator.h.

#include "nccl_communicator.h"

#include "../core/error.h"

#if EMBER_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "../core/autograd.h"
#include "../core/cuda/ledger.h"
#include "../core/cuda/runtime.h"
#endif

namespace ember::parallel {

#if EMBER_NCCL

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes, "ncclUniqueId changed size");

namespace {

using Clock = std::chrono::steady_clock;

// "ncclAllReduce: invalid argument (NCCL: <last warning>)".
std::string nccl_error(const char* what, ncclResult_t r, ncclComm_t comm) {
  std::ostringstream os;
  os << what << ": " << ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') os << " (NCCL: " << last << ")";
  return os.str();
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    case DType::boolean: break;
  }
  EMBER_THROW("NCCL communicator: dtype ", dtype_name(t), " is not supported (f32, f64, f16, bf16, i32, i64, u8)");
}

// Polls `done` until it says true, failing on an asynchronous NCCL error or at the deadline.
// Backs off from 20 µs to 1 ms between polls: short collectives finish without a sleep's delay,
// long ones do not spin a core.
template <class Done>
void poll_until(ncclComm_t comm, Clock::time_point deadline, double timeout_s, const char* phase, Done done) {
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    if (done()) return;
    ncclResult_t async = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &async);
    if (r != ncclSuccess) throw Error(nccl_error("ncclCommGetAsyncError", r, comm));
    if (async != ncclSuccess && async != ncclInProgress) throw Error(nccl_error(phase, async, comm));
    if (Clock::now() > deadline) {
      std::ostringstream os;
      os << "timed out after " << timeout_s << " s " << phase
         << " (another rank died, stopped calling collectives, or called them in a different order)";
      throw Error(os.str());
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

// An NCCL call on a non-blocking communicator: ncclInProgress means "still being issued";
// wait until the communicator says it is done before anything else touches it.
void issue(ncclComm_t comm, ncclResult_t r, const char* what, Clock::time_point deadline, double timeout_s) {
  if (r == ncclInProgress) {
    poll_until(comm, deadline, timeout_s, what, [&] {
      ncclResult_t async = ncclSuccess;
      return ncclCommGetAsyncError(comm, &async) == ncclSuccess && async == ncclSuccess;
    });
    return;
  }
  if (r != ncclSuccess) throw Error(nccl_error(what, r, comm));
}

// What prepare() captures: the caller's stream state when the collective was issued.
struct Issued {
  explicit Issued(int device) : ready(device) {}
  cuda::Event ready;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(int rank, int world, int device, const std::vector<uint8_t>& id)
      : Communicator(rank, world), device_(device), stream_(check_device(device)) {
    EMBER_CHECK(id.size() == sizeof(ncclUniqueId), who(), ": an NCCL unique id has ", sizeof(ncclUniqueId),
                " bytes, got ", id.size());
    ncclUniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof(uid.internal));
    cuda::DeviceGuard guard(device_);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every call returns at once; we poll against the deadline
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, world, uid, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (comm != nullptr) ncclCommAbort(comm);
      EMBER_THROW(who(), ": joining the NCCL communicator on cuda:", device_, " failed: ", ncclGetErrorString(r),
                  comm == nullptr ? "" : " (NCCL: " + std::string(ncclGetLastError(comm)) + ")");
    }
    comm_ = comm;
    done_ = std::make_unique<cuda::Event>(device_);
    const double timeout_s = static_cast<double>(timeout().count()) / 1000.0;
    try {
      issue(comm_, r, "waiting for every rank to join the NCCL communicator", Clock::now() + timeout(), timeout_s);
    } catch (const Error& e) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      EMBER_THROW(who(), ": ", e.what());
    }
    EMBER_CUDA_CHECK(cudaMalloc(&headers_dev_, sizeof(int64_t) * CollectiveHeader::kWords * (world + 1)));
  }

  ~NcclCommunicator() override {
    shutdown();  // queued collectives run (or fail) first
    cuda::DeviceGuard guard(device_);
    if (comm_ != nullptr) {
      // Healthy: finalize (flushes nothing here: every collective was waited for), then destroy.
      // Broken: abort, which never waits for peers.
      bool finalized = false;
      if (failure().empty()) {
        // Non-blocking: ncclCommFinalize may answer ncclInProgress; wait (bounded) until it is done.
        try {
          const double timeout_s = static_cast<double>(timeout().count()) / 1000.0;
          issue(comm_, ncclCommFinalize(comm_), "ncclCommFinalize", Clock::now() + timeout(), timeout_s);
          finalized = true;
        } catch (const Error&) {
          // fall through to abort: a destructor reports nothing
        }
      }
      if (finalized) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (headers_dev_ != nullptr) cudaFree(headers_dev_);
  }

  std::string backend() const override { return "nccl"; }

 protected:
  void prepare(Collective& c) override {
    auto check = [&](const Tensor& t) {
      EMBER_CHECK(t.device().is_cpu() || t.device() == Device::cuda(device_), who(), ": ",
                  collective_name(c.header.kind), " of ", describe(t), ": this communicator's device is cuda:", device_,
                  " (CPU tensors are staged through it; other devices are not)");
      if (c.header.kind != CollectiveKind::barrier) nccl_type(t.dtype());
    };
    if (c.tensor.defined()) check(c.tensor);
    for (const Tensor& o : c.outputs) check(o);
    // The point in the caller's stream after which its tensors are ready.
    cuda::DeviceGuard guard(device_);
    auto issued = std::make_shared<Issued>(device_);
    issued->ready.record(cuda::current_stream());
    c.issued = issued;
  }

  void run(Collective& c) override {
    cuda::DeviceGuard device(device_);
    cuda::StreamGuard on_comm_stream(stream_.get());  // staging copies run there too
    const auto deadline = Clock::now() + timeout();
    const double timeout_s = static_cast<double>(timeout().count()) / 1000.0;
    try {
      if (c.issued) static_cast<Issued*>(c.issued.get())->ready.wait_on(stream_.get());
      exchange_headers(c.header, deadline, timeout_s);
      move_data(c, deadline, timeout_s);
      wait_for_stream("waiting for the collective to finish on the device", deadline, timeout_s);
    } catch (...) {
      // The communicator cannot be trusted after a failed or timed-out collective (peers may be
      // inside it): abort it now, so nothing on the device waits for the peers any more.
      ncclCommAbort(comm_);
      comm_ = nullptr;
      throw;
    }
  }

 private:
  static int check_device(int device) {
    const int n = cuda::device_count();
    EMBER_CHECK(device >= 0 && device < n, "NCCL communicator: CUDA device ", device, " does not exist (", n,
                " device(s))");
    return device;
  }

  // Waits until everything queued on the comm stream so far has run on the device, polling
  // against the deadline (a stream with an NCCL kernel whose peer never comes would never finish).
  void wait_for_stream(const char* phase, Clock::time_point deadline, double timeout_s) {
    done_->record(stream_.get());
#if EMBER_SIMT
    // The emulator's deferred streams (EMBER_SIMT_DEFER=1) run only at synchronization points, not
    // when queried, so polling alone would never see them finish. Synchronizing cannot hang here:
    // the shim's collectives complete on the host before they return, and what is left on the
    // stream (copies, kernels) waits for no peer.
    done_->synchronize();
#endif
    poll_until(comm_, deadline, timeout_s, phase, [&] { return done_->query(); });
  }

  // All-gathers every rank's header and compares them (Note [Collectives: order, headers, failure]).
  void exchange_headers(const CollectiveHeader& h, Clock::time_point deadline, double timeout_s) {
    const int n = world_size();
    const size_t words = CollectiveHeader::kWords;
    std::vector<int64_t> host(words * (n + 1));
    h.to_words(host.data());
    int64_t* mine = headers_dev_;
    int64_t* all = headers_dev_ + words;
    EMBER_CUDA_CHECK(
        cudaMemcpyAsync(mine, host.data(), words * sizeof(int64_t), cudaMemcpyHostToDevice, stream_.get()));
    // Recorded in a launch ledger like the data's collective, and made in every mode: the headers
    // must agree before any data moves.
    (void)record_collective("ncclAllGather (headers)", static_cast<int64_t>(words * n * sizeof(int64_t)), stream_.get());
    issue(comm_, ncclAllGather(mine, all, words, ncclInt64, comm_, stream_.get()), "exchanging headers (ncclAllGather)",
          deadline, timeout_s);
    cuda::ledger_host_sync("NCCL header exchange");
    EMBER_CUDA_CHECK(
        cudaMemcpyAsync(host.data() + words, all, words * n * sizeof(int64_t), cudaMemcpyDeviceToHost, stream_.get()));
    wait_for_stream("while exchanging headers", deadline, timeout_s);
    std::vector<CollectiveHeader> headers;
    for (int r = 0; r < n; ++r) headers.push_back(CollectiveHeader::from_words(host.data() + words * (r + 1)));
    if (std::string m = compare_headers(headers); !m.empty()) throw Error(m);
  }

  // A contiguous tensor on this device with t's values: t itself when it already is one.
  Tensor on_device(const Tensor& t) const {
    if (t.device() == Device::cuda(device_) && t.is_contiguous()) return t;
    return t.to(Device::cuda(device_)).contiguous();
  }

  // Records a collective of `bytes` (the buffer's size, each rank's) in the running launch ledger
  // (Note [Launch ledger]); returns whether to run it.
  static bool record_collective(const char* function, int64_t bytes, cudaStream_t s) {
    if (!cuda::ledger_on()) return true;
    const double b = static_cast<double>(bytes);
    return cuda::ledger_call(cuda::CallKind::nccl, function, cuda::cost(b, b), s);
  }

  void move_data(Collective& c, Clock::time_point deadline, double timeout_s) {
    cudaStream_t s = stream_.get();
    switch (c.header.kind) {
      case CollectiveKind::all_reduce: {
        Tensor buf = on_device(c.tensor);
        const bool avg = c.op == ReduceOp::avg;
        if (!record_collective("ncclAllReduce", buf.nbytes(), s)) break;
        issue(comm_,
              ncclAllReduce(buf.data(), buf.data(), static_cast<size_t>(buf.numel()), nccl_type(buf.dtype()),
                            avg ? ncclAvg : ncclSum, comm_, s),
              "ncclAllReduce", deadline, timeout_s);
        if (!buf.is_same(c.tensor)) c.tensor.copy_(buf);
        break;
      }
      case CollectiveKind::broadcast: {
        Tensor buf = on_device(c.tensor);
        if (!record_collective("ncclBroadcast", buf.nbytes(), s)) break;
        issue(comm_,
              ncclBroadcast(buf.data(), buf.data(), static_cast<size_t>(buf.numel()), nccl_type(buf.dtype()),
                            static_cast<int>(c.header.root), comm_, s),
              "ncclBroadcast", deadline, timeout_s);
        if (!buf.is_same(c.tensor)) c.tensor.copy_(buf);
        break;
      }
      case CollectiveKind::all_gather: {
        Tensor in = on_device(c.tensor);
        const int64_t n = in.numel();
        Tensor gathered = empty({world_size() * n}, {.dtype = in.dtype(), .device = Device::cuda(device_)});
        if (!record_collective("ncclAllGather", gathered.nbytes(), s)) break;
        issue(comm_, ncclAllGather(in.data(), gathered.data(), static_cast<size_t>(n), nccl_type(in.dtype()), comm_, s),
              "ncclAllGather", deadline, timeout_s);
        for (int r = 0; r < world_size(); ++r) c.outputs[r].copy_(gathered.narrow(0, r * n, n).view(in.shape()));
        break;
      }
      case CollectiveKind::barrier: break;  // the header exchange already made every rank meet
    }
  }

  int device_;
  cuda::StreamHandle stream_;
  std::unique_ptr<cuda::Event> done_;  // records "the comm stream got here"
  ncclComm_t comm_ = nullptr;
  int64_t* headers_dev_ = nullptr;  // [this rank's header | every rank's headers]
};

}  // namespace

bool nccl_built() { return true; }

bool nccl_is_shim() {
#if EMBER_SIMT
  return true;
#else
  return false;
#endif
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  // NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9.
  std::ostringstream os;
  os << v / 10000 << "." << (v / 100) % 100 << "." << v % 100;
  return os.str();
}

std::vector<uint8_t> nccl_unique_id() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  EMBER_CHECK(r == ncclSuccess, "ncclGetUniqueId failed: ", ncclGetErrorString(r));
  return std::vector<uint8_t>(reinterpret_cast<const uint8_t*>(id.internal),
                              reinterpret_cast<const uint8_t*>(id.internal) + sizeof(id.internal));
}

std::shared_ptr<Communicator> make_nccl_communicator(int rank, int world_size, int device,
                                                     const std::vector<uint8_t>& id) {
  return std::make_shared<NcclCommunicator>(rank, world_size, device, id);
}

#else  // no NCCL in this build

bool nccl_built() { return false; }
bool nccl_is_shim() { return false; }
std::string nccl_version() { return ""; }

std::vector<uint8_t> nccl_unique_id() {
  EMBER_THROW("this ember was built without NCCL (a CUDA build needs libnccl; see docs/distributed.md)");
}

std::shared_ptr<Communicator> make_nccl_communicator(int rank, int world_size, int, const std::vector<uint8_t>&) {
  EMBER_THROW("rank ", rank, " of ", world_size,
              ": this ember was built without NCCL (a CUDA build needs libnccl; see docs/distributed.md)");
}

#endif

}  // namespace ember::parallel
