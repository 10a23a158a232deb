// MPI ranks (mpi_communicator.h). Compiled in every build; the MPI code only with EMBER_MPI=1.

#include "mpi_communicator.h"

#include "../core/error.h"

#if EMBER_MPI
// The C API only: no deprecated C++ bindings (and their warnings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>
#endif

namespace ember::parallel {

#if EMBER_MPI

namespace {

std::mutex g_init_mu;
// A collective timed out or MPI reported an error: peers may still be inside it, so MPI_Finalize
// (itself a synchronization) could hang. Skip it; the launcher ends the job.
std::atomic<bool> g_transport_broken{false};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !g_transport_broken.load()) MPI_Finalize();
}

void ensure_mpi_initialized() {
  std::lock_guard<std::mutex> lock(g_init_mu);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  // SERIALIZED is all the communicator needs (its comm thread makes every call, one at a time);
  // MULTIPLE also lets abort_job() run while the comm thread waits in a collective.
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  EMBER_CHECK(rc == MPI_SUCCESS, "MPI_Init_thread failed (error ", rc, ")");
  EMBER_CHECK(provided >= MPI_THREAD_SERIALIZED, "MPI: this MPI library provides thread level ", provided,
              "; ember's communicator needs MPI_THREAD_SERIALIZED or better");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit(finalize_at_exit);
}

std::string mpi_error(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, len);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    default: EMBER_THROW("MPI communicator: dtype ", dtype_name(t), " is not supported (f32, f64, i32, i64, u8)");
  }
}

// A contiguous CPU tensor with t's values (t itself when it already is one).
Tensor staged(const Tensor& t) {
  if (t.device().is_cpu() && t.is_contiguous()) return t;
  return t.to(Device::cpu()).contiguous();
}

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(int rank, int world, MPI_Comm comm) : Communicator(rank, world), comm_(comm) {}

  ~MpiCommunicator() override {
    shutdown();
    if (!g_transport_broken.load()) MPI_Comm_free(&comm_);
  }

  std::string backend() const override { return "mpi"; }

 protected:
  void run(Collective& c) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout();

    // Headers first: every rank learns every rank's call, so a mismatch is an error everywhere.
    const int n = world_size();
    int64_t mine[CollectiveHeader::kWords];
    c.header.to_words(mine);
    std::vector<int64_t> all(static_cast<size_t>(n) * CollectiveHeader::kWords);
    MPI_Request req;
    check(MPI_Iallgather(mine, CollectiveHeader::kWords, MPI_INT64_T, all.data(), CollectiveHeader::kWords,
                         MPI_INT64_T, comm_, &req),
          "exchanging headers");
    wait(req, deadline, "exchanging headers");
    std::vector<CollectiveHeader> headers;
    for (int r = 0; r < n; ++r) headers.push_back(CollectiveHeader::from_words(all.data() + r * CollectiveHeader::kWords));
    if (std::string m = compare_headers(headers); !m.empty()) throw Error(m);

    if (c.header.kind == CollectiveKind::barrier || c.header.numel == 0) return;
    EMBER_CHECK(c.header.numel <= INT32_MAX, "MPI communicator: ", c.header.numel,
                " elements is more than one MPI call takes (2^31 - 1)");
    const int count = static_cast<int>(c.header.numel);
    const MPI_Datatype type = mpi_type(c.tensor.dtype());
    Tensor buf = staged(c.tensor);
    switch (c.header.kind) {
      case CollectiveKind::all_reduce:
        check(MPI_Iallreduce(MPI_IN_PLACE, buf.data(), count, type, MPI_SUM, comm_, &req), "all_reduce");
        wait(req, deadline, "moving the data");
        if (c.op == ReduceOp::avg) buf.div_(static_cast<double>(n));
        if (!buf.is_same(c.tensor)) c.tensor.copy_(buf);
        break;
      case CollectiveKind::broadcast:
        check(MPI_Ibcast(buf.data(), count, type, static_cast<int>(c.header.root), comm_, &req), "broadcast");
        wait(req, deadline, "moving the data");
        if (!buf.is_same(c.tensor) && rank() != c.header.root) c.tensor.copy_(buf);
        break;
      case CollectiveKind::all_gather: {
        Tensor recv = empty({n * c.header.numel}, {.dtype = c.tensor.dtype()});
        check(MPI_Iallgather(buf.data(), count, type, recv.data(), count, type, comm_, &req), "all_gather");
        wait(req, deadline, "moving the data");
        for (int r = 0; r < n; ++r)
          c.outputs[r].copy_(recv.narrow(0, r * c.header.numel, c.header.numel).view(c.tensor.shape()));
        break;
      }
      case CollectiveKind::barrier:
        break;
    }
  }

 private:
  void check(int rc, const char* what) {
    if (rc == MPI_SUCCESS) return;
    g_transport_broken = true;
    throw Error(std::string("MPI error while ") + what + ": " + mpi_error(rc));
  }

  // Polls `req` until it completes or the deadline passes. Spins briefly, then sleeps with
  // growing pauses (up to 1 ms), so a rank waiting for a slow peer leaves the cores to compute.
  void wait(MPI_Request& req, std::chrono::steady_clock::time_point deadline, const char* what) {
    auto pause = std::chrono::microseconds(5);
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
      if (done) return;
      if (std::chrono::steady_clock::now() > deadline) {
        g_transport_broken = true;
        std::ostringstream os;
        os << "timed out after " << static_cast<double>(timeout().count()) / 1000.0 << " s while " << what
           << " (another rank died, stopped calling collectives, or called them in a different order)";
        throw Error(os.str());
      }
      if (polls < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(1000));
      }
    }
  }

  MPI_Comm comm_;
};

}  // namespace

bool mpi_built() { return true; }

std::shared_ptr<Communicator> make_mpi_communicator(const LaunchInfo& expected) {
  ensure_mpi_initialized();
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EMBER_CHECK(size == expected.world_size && rank == expected.rank, "MPI says this process is rank ", rank, " of ",
              size, " but the ", expected.launcher, " environment says rank ", expected.rank, " of ",
              expected.world_size, " (a wrong world size?)");
  MPI_Comm comm;
  const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  EMBER_CHECK(rc == MPI_SUCCESS, "MPI_Comm_dup failed: ", mpi_error(rc));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return std::make_shared<MpiCommunicator>(rank, size, comm);
}

void abort_job(int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

#else  // !EMBER_MPI

bool mpi_built() { return false; }

std::shared_ptr<Communicator> make_mpi_communicator(const LaunchInfo& expected) {
  EMBER_THROW("launched by ", expected.launcher, " as rank ", expected.rank, " of ", expected.world_size,
              " but this ember was built without MPI (install libopenmpi-dev and reconfigure with EMBER_MPI=ON)");
}

void abort_job(int) {}

#endif

}  // namespace ember::parallel
