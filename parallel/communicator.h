#pragma once
// Communicators: the collectives data-parallel training needs (all_reduce, broadcast, all_gather,
// barrier) among the ranks of one job, on ember Tensors.
//
//   auto comm = parallel::init_from_env();           // MPI under mpirun/srun, else a world of 1
//   comm->all_reduce(grad, parallel::ReduceOp::avg);  // every rank now holds the mean
//   auto work = comm->all_reduce_async(bucket);       // queued; overlaps with the caller's work
//   ...
//   work->wait();                                     // rethrows the collective's error, if any
//
// Implementations: MpiCommunicator (parallel/mpi_communicator.h; CPU clusters, CI), in-process
// ranks (parallel/inprocess_communicator.h; threads sharing memory, for tests), and NCCL for CUDA
// tensors (parallel/nccl_communicator.h; one process per GPU). They differ only in `run()`, the
// blocking transport of one collective (and `prepare()`, what it captures at issue time);
// everything else (ordering, asynchrony, checks, timeouts) is here.
//
// Note [Collectives: order, headers, failure]
// * Order. Every rank must issue the same collectives in the same order (as in MPI and NCCL).
//   Each communicator runs its collectives one at a time, in issue order, on its own worker
//   thread ("the comm thread"): *_async() only queues the collective and returns a Work, so the
//   caller (e.g. the autograd engine running backward) keeps computing while the collective runs.
// * Headers. Before moving any data, the ranks exchange a small header (sequence number, kind,
//   reduce op, dtype, element count, root, a caller tag) and compare it. Different tensor sizes,
//   a broadcast on one rank against an all_reduce on another, or a DDP bucket whose parameters
//   were used on one rank but not another (the tag) are reported as an ember::Error on *every*
//   rank, naming the collective and the ranks that disagree — never undefined behaviour.
// * Failure. A collective that does not complete within timeout() (a rank that died or stopped
//   calling collectives) fails with an ember::Error naming the rank and the collective. After a
//   failure the communicator is broken: every later collective fails at once with the first
//   error. An MPI job whose communicator broke cannot be finalized cleanly (peers may still sit
//   in the collective): applications end it with abort_job() after printing the error.
// * Devices. Tensors may live on any device. The in-process transport computes with Tensor ops
//   (so CUDA tensors reduce on their device); MPI stages non-CPU or non-contiguous tensors
//   through a contiguous CPU copy. Results are written back into the caller's tensor in place.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../core/tensor.h"

namespace ember::parallel {

enum class ReduceOp { sum, avg };

enum class CollectiveKind : int64_t { all_reduce = 1, broadcast = 2, all_gather = 3, barrier = 4 };
const char* collective_name(CollectiveKind kind);

// What every rank says about a collective before it runs (Note [Collectives: order, headers,
// failure]). Transports exchange it as kHeaderWords int64 words.
struct CollectiveHeader {
  int64_t sequence = 0;  // 0, 1, 2, ... per communicator
  CollectiveKind kind = CollectiveKind::barrier;
  int64_t op = 0;        // ReduceOp for all_reduce, else 0
  int64_t dtype = 0;     // static_cast<int64_t>(DType)
  int64_t numel = 0;
  int64_t root = 0;      // broadcast only, else 0
  int64_t tag = 0;       // caller-chosen; must match across ranks (DDP: which params had grads)
  static constexpr int kWords = 7;
  void to_words(int64_t* w) const;
  static CollectiveHeader from_words(const int64_t* w);
  std::string str() const;  // "all_reduce #3 (1024 float32, sum)"
};

// Compares the headers of every rank (index = rank). Returns "" when they agree, else a message
// naming the ranks that differ from rank 0 and how.
std::string compare_headers(const std::vector<CollectiveHeader>& headers);

// The handle of a queued collective.
class Work {
 public:
  explicit Work(std::string what) : what_(std::move(what)) {}
  // Blocks until the collective finished; rethrows its ember::Error if it failed.
  void wait();
  bool completed() const;
  const std::string& what() const { return what_; }

  // For transports: mark done, with the error if it failed.
  void finish(std::exception_ptr error);

 private:
  std::string what_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// One queued collective: what it is and the tensors it works on. `tensor` is written in place
// (all_reduce, broadcast); all_gather reads `tensor` and writes `outputs` (one per rank, each
// shaped like `tensor`).
struct Collective {
  CollectiveHeader header;
  ReduceOp op = ReduceOp::sum;
  Tensor tensor;
  std::vector<Tensor> outputs;
  std::shared_ptr<Work> work;
  // What the transport captured in the caller's thread at issue time (prepare()); NCCL: an event
  // recorded on the caller's current stream.
  std::shared_ptr<void> issued;
};

class Communicator {
 public:
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  virtual std::string backend() const = 0;  // "mpi", "inprocess", "nccl"

  // ---- asynchronous collectives: queued in issue order, run on the comm thread -------------
  // The tensors are held by the Work until it finishes; don't touch them before wait().
  // `tag` must be the same on every rank (compare_headers).
  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::sum, int64_t tag = 0);
  std::shared_ptr<Work> broadcast_async(const Tensor& tensor, int root = 0);
  // outputs: world_size() tensors shaped like input, same dtype; outputs[r] receives rank r's input.
  std::shared_ptr<Work> all_gather_async(const std::vector<Tensor>& outputs, const Tensor& input);

  // ---- blocking forms ----------------------------------------------------------------------
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum, int64_t tag = 0) {
    all_reduce_async(tensor, op, tag)->wait();
  }
  void broadcast(const Tensor& tensor, int root = 0) { broadcast_async(tensor, root)->wait(); }
  std::vector<Tensor> all_gather(const Tensor& input);
  void barrier();

  // How long one collective may wait for the other ranks before it fails. Default: 300 s, or
  // EMBER_DIST_TIMEOUT (seconds) from the environment.
  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(timeout_ms_.load()); }
  void set_timeout(std::chrono::milliseconds t) { timeout_ms_.store(t.count()); }

  // The first error, once a collective failed ("" while healthy).
  std::string failure() const;
  // Seconds collectives spent running on the comm thread (transport time, including waiting for
  // other ranks), since construction.
  double busy_seconds() const;

 protected:
  Communicator(int rank, int world_size);
  // Runs one collective to completion on the comm thread, honouring timeout(): exchanges and
  // checks the headers, moves the data. Throws ember::Error on failure (the base adds the rank
  // and collective to the message and breaks the communicator).
  virtual void run(Collective& c) = 0;
  // Called in the caller's thread when a collective is issued, before it is queued: checks that
  // only this transport makes (ember::Error to the caller; the communicator stays healthy) and
  // captures what run() needs from the caller's context into c.issued. Default: nothing.
  virtual void prepare(Collective& c) {}
  // Stops the comm thread after the queued collectives ran (or failed); subclasses call it first
  // thing in their destructor, while their transport still exists.
  void shutdown();
  // Prefix for errors: "rank 1/3 (mpi)".
  std::string who() const;

 private:
  std::shared_ptr<Work> enqueue(Collective c);
  void loop();

  int rank_, world_size_;
  std::atomic<int64_t> timeout_ms_;
  int64_t next_sequence_ = 0;  // guarded by mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Collective> queue_;
  bool stopping_ = false;
  std::string failure_;
  double busy_seconds_ = 0;
  std::thread thread_;
};

// ---- launchers ----------------------------------------------------------------------------

// Where this process sits in the job, from the launcher's environment variables:
//   mpirun (OpenMPI)  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   mpirun (MPICH)    PMI_RANK, PMI_SIZE (local rank: MPI_LOCALRANKID)
//   srun (Slurm)      SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID (not SLURM_NTASKS: an
//                     sbatch script sees the allocation's count while it runs alone)
//   torchrun-style    RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// Without any of them: rank 0 of 1 ("none"). When several launchers' variables are present they
// must agree on rank and world size; otherwise ember::Error names both.
struct LaunchInfo {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string launcher = "none";  // none | mpirun | slurm | torchrun
  std::string master_addr;        // torchrun-style only
  int master_port = 0;
};
using EnvLookup = std::function<const char*(const char*)>;
LaunchInfo detect_launch(const EnvLookup& env = {});  // default: std::getenv

// Whether this build has the MPI communicator.
bool mpi_built();

// The communicator for this process: MpiCommunicator when the job has more than one process and
// was started by mpirun or srun (MPI is initialized on first use); a world of one otherwise.
// Throws ember::Error when the environment asks for more than one process but ember cannot
// join them (built without MPI, or a torchrun-style environment: ember's CPU transport is MPI;
// launch with mpirun/srun), or when MPI's view of the job disagrees with the launcher's.
std::shared_ptr<Communicator> init_from_env();

// The communicator for collectives on tensors of `device` (one device per process: cuda:<local
// rank>). For a CUDA device in a build with a real NCCL: the NCCL communicator on that device,
// its unique id made by rank 0 and shared through MPI_Bcast under mpirun/srun, else through the
// rendezvous in the environment (MASTER_ADDR/MASTER_PORT or EMBER_RENDEZVOUS_FILE; torchrun-style
// launches work this way). Otherwise (the CPU; a build without NCCL; the SIMT flavour, whose NCCL
// shim joins only threads of one process) the same as init_from_env(): MPI, staging CUDA tensors
// through the host. EMBER_DIST_BACKEND=mpi|nccl overrides the choice (nccl where it cannot work is
// an ember::Error saying why).
std::shared_ptr<Communicator> init_from_env(Device device);

// Ends the whole job now with `code`: MPI_Abort when MPI is running with more than one process,
// else returns without doing anything. For applications, after they printed an error that
// broke a communicator; library code never calls it.
void abort_job(int code);

}  // namespace ember::parallel
