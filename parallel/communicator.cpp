// The Communicator base: the comm thread, Work handles, headers, launcher detection.
// See Note [Collectives: order, headers, failure] in communicator.h.

#include "communicator.h"

#include <cstdlib>
#include <sstream>

#include "../core/autograd.h"
#include "../core/error.h"
#include "inprocess_communicator.h"
#include "mpi_communicator.h"
#include "nccl_communicator.h"
#include "rendezvous.h"

namespace ember::parallel {

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::barrier: return "barrier";
  }
  return "unknown collective";
}

// ---- headers ----------------------------------------------------------------------------------

void CollectiveHeader::to_words(int64_t* w) const {
  w[0] = sequence;
  w[1] = static_cast<int64_t>(kind);
  w[2] = op;
  w[3] = dtype;
  w[4] = numel;
  w[5] = root;
  w[6] = tag;
}

CollectiveHeader CollectiveHeader::from_words(const int64_t* w) {
  CollectiveHeader h;
  h.sequence = w[0];
  h.kind = static_cast<CollectiveKind>(w[1]);
  h.op = w[2];
  h.dtype = w[3];
  h.numel = w[4];
  h.root = w[5];
  h.tag = w[6];
  return h;
}

std::string CollectiveHeader::str() const {
  std::ostringstream os;
  os << collective_name(kind) << " #" << sequence;
  if (kind == CollectiveKind::barrier) return os.str();
  os << " (" << numel << " ";
  if (dtype >= 0 && dtype < kNumDTypes) {
    os << dtype_name(static_cast<DType>(dtype));
  } else {
    os << "dtype " << dtype;
  }
  if (kind == CollectiveKind::all_reduce) os << ", " << (op == static_cast<int64_t>(ReduceOp::avg) ? "avg" : "sum");
  if (kind == CollectiveKind::broadcast) os << ", root " << root;
  os << ")";
  return os.str();
}

std::string compare_headers(const std::vector<CollectiveHeader>& headers) {
  std::ostringstream os;
  for (size_t r = 1; r < headers.size(); ++r) {
    const CollectiveHeader& a = headers[0];
    const CollectiveHeader& b = headers[r];
    const bool same_call = a.sequence == b.sequence && a.kind == b.kind && a.op == b.op && a.dtype == b.dtype &&
                           a.numel == b.numel && a.root == b.root;
    if (same_call && a.tag == b.tag) continue;
    if (os.tellp() > 0) os << "; ";
    if (same_call) {
      os << "rank " << r << " and rank 0 disagree on " << a.str() << " (tag " << b.tag << " vs " << a.tag << ")";
    } else {
      os << "rank " << r << " called " << b.str() << " but rank 0 called " << a.str();
    }
  }
  if (os.tellp() == 0) return "";
  return "mismatched collective: " + os.str();
}

// ---- Work -------------------------------------------------------------------------------------

void Work::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
}

bool Work::completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

// ---- Communicator -----------------------------------------------------------------------------

namespace {
std::chrono::milliseconds default_timeout() {
  if (const char* s = std::getenv("EMBER_DIST_TIMEOUT")) {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    EMBER_CHECK(end != s && *end == '\0' && v > 0, "EMBER_DIST_TIMEOUT must be a positive number of seconds, got '",
                s, "'");
    return std::chrono::milliseconds(static_cast<int64_t>(v * 1000));
  }
  return std::chrono::seconds(300);
}
}  // namespace

Communicator::Communicator(int rank, int world_size)
    : rank_(rank), world_size_(world_size), timeout_ms_(default_timeout().count()) {
  EMBER_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "communicator: rank ", rank,
              " is outside a world of size ", world_size);
  thread_ = std::thread([this] { loop(); });
}

Communicator::~Communicator() { shutdown(); }

void Communicator::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string Communicator::who() const {
  std::ostringstream os;
  os << "rank " << rank_ << "/" << world_size_ << " (" << backend() << ")";
  return os.str();
}

std::string Communicator::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

double Communicator::busy_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_seconds_;
}

std::shared_ptr<Work> Communicator::enqueue(Collective c) {
  prepare(c);
  std::lock_guard<std::mutex> lock(mu_);
  EMBER_CHECK(!stopping_, who(), ": ", collective_name(c.header.kind), " on a communicator that is shutting down");
  c.header.sequence = next_sequence_++;
  c.work = std::make_shared<Work>(who() + " " + c.header.str());
  std::shared_ptr<Work> w = c.work;
  queue_.push_back(std::move(c));
  cv_.notify_all();
  return w;
}

void Communicator::loop() {
  for (;;) {
    Collective c;
    std::string broken;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      c = std::move(queue_.front());
      queue_.pop_front();
      broken = failure_;
    }
    if (!broken.empty()) {
      c.work->finish(std::make_exception_ptr(
          Error(who() + ": " + c.header.str() + " not run: the communicator failed earlier: " + broken)));
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::exception_ptr error;
    try {
      NoGradGuard no_grad;  // results are data, not part of any graph
      run(c);
    } catch (const std::exception& e) {
      const std::string msg = who() + ": " + c.header.str() + " failed: " + e.what();
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (failure_.empty()) failure_ = msg;
      }
      error = std::make_exception_ptr(Error(msg));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      busy_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    c.work->finish(error);
  }
}

namespace {
void check_tensor(const Tensor& t, const char* op) {
  EMBER_CHECK(t.defined(), op, ": undefined tensor");
}
}  // namespace

std::shared_ptr<Work> Communicator::all_reduce_async(const Tensor& tensor, ReduceOp op, int64_t tag) {
  check_tensor(tensor, "all_reduce");
  EMBER_CHECK(op == ReduceOp::sum || tensor.is_floating_point(), "all_reduce: avg needs a floating-point tensor, got ",
              describe(tensor));
  Collective c;
  c.header = {.kind = CollectiveKind::all_reduce, .op = static_cast<int64_t>(op),
              .dtype = static_cast<int64_t>(tensor.dtype()), .numel = tensor.numel(), .tag = tag};
  c.op = op;
  c.tensor = tensor;
  return enqueue(std::move(c));
}

std::shared_ptr<Work> Communicator::broadcast_async(const Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast");
  EMBER_CHECK(root >= 0 && root < world_size_, "broadcast: root ", root, " is outside a world of size ", world_size_);
  Collective c;
  c.header = {.kind = CollectiveKind::broadcast, .dtype = static_cast<int64_t>(tensor.dtype()),
              .numel = tensor.numel(), .root = root};
  c.tensor = tensor;
  return enqueue(std::move(c));
}

std::shared_ptr<Work> Communicator::all_gather_async(const std::vector<Tensor>& outputs, const Tensor& input) {
  check_tensor(input, "all_gather");
  EMBER_CHECK(static_cast<int>(outputs.size()) == world_size_, "all_gather: ", outputs.size(),
              " output tensors for a world of size ", world_size_);
  for (const Tensor& o : outputs) {
    check_tensor(o, "all_gather");
    EMBER_CHECK(o.shape() == input.shape() && o.dtype() == input.dtype(), "all_gather: output ", describe(o),
                " does not match the input ", describe(input));
  }
  Collective c;
  c.header = {.kind = CollectiveKind::all_gather, .dtype = static_cast<int64_t>(input.dtype()), .numel = input.numel()};
  c.tensor = input;
  c.outputs = outputs;
  return enqueue(std::move(c));
}

std::vector<Tensor> Communicator::all_gather(const Tensor& input) {
  std::vector<Tensor> out;
  for (int r = 0; r < world_size_; ++r) out.push_back(empty(input.shape(), {.dtype = input.dtype(), .device = input.device()}));
  all_gather_async(out, input)->wait();
  return out;
}

void Communicator::barrier() {
  Collective c;
  c.header = {.kind = CollectiveKind::barrier};
  enqueue(std::move(c))->wait();
}

// ---- launchers --------------------------------------------------------------------------------

namespace {

struct EnvInt {
  const char* name;
  int value;
};

// The integer value of `name`, or -1 when unset; throws on garbage.
int env_int(const EnvLookup& env, const char* name) {
  const char* s = env(name);
  if (s == nullptr || *s == '\0') return -1;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  EMBER_CHECK(end != s && *end == '\0' && v >= 0, "launcher environment: ", name, "='", s,
              "' is not a non-negative integer");
  return static_cast<int>(v);
}

}  // namespace

LaunchInfo detect_launch(const EnvLookup& lookup) {
  const EnvLookup env = lookup ? lookup : EnvLookup([](const char* n) -> const char* { return std::getenv(n); });
  std::vector<LaunchInfo> found;
  std::vector<std::string> sources;
  auto add = [&](const char* launcher, const char* rank_var, const char* size_var, const char* local_var,
                 const char* local_size_var) {
    const int rank = env_int(env, rank_var), size = env_int(env, size_var);
    if (rank < 0 && size < 0) return;
    EMBER_CHECK(rank >= 0 && size >= 1, "launcher environment: ", rank_var, " and ", size_var,
                " must both be set (", size_var, " >= 1)");
    EMBER_CHECK(rank < size, "launcher environment: ", rank_var, "=", rank, " is not below ", size_var, "=", size);
    LaunchInfo li;
    li.launcher = launcher;
    li.rank = rank;
    li.world_size = size;
    const int local = local_var ? env_int(env, local_var) : -1;
    const int local_size = local_size_var ? env_int(env, local_size_var) : -1;
    li.local_rank = local >= 0 ? local : rank;
    li.local_world_size = local_size >= 1 ? local_size : size;
    found.push_back(li);
    sources.push_back(std::string(rank_var) + "/" + size_var);
  };
  add("mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
      "OMPI_COMM_WORLD_LOCAL_SIZE");
  add("mpirun", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
  // srun: SLURM_STEP_NUM_TASKS is the job step's task count. SLURM_NTASKS is not used: inside an
  // sbatch script it is the allocation's count while only the script itself runs.
  if (env("SLURM_PROCID") && env("SLURM_STEP_NUM_TASKS"))
    add("slurm", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", nullptr);
  add("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  if (found.empty()) return {};
  for (size_t i = 1; i < found.size(); ++i) {
    EMBER_CHECK(found[i].rank == found[0].rank && found[i].world_size == found[0].world_size,
                "launcher environment disagrees: ", sources[0], " say rank ", found[0].rank, " of ",
                found[0].world_size, " but ", sources[i], " say rank ", found[i].rank, " of ", found[i].world_size,
                " (a wrong world size? unset the stale variables)");
  }
  LaunchInfo li = found[0];
  if (const char* a = env("MASTER_ADDR")) li.master_addr = a;
  if (const int p = env_int(env, "MASTER_PORT"); p >= 0) li.master_port = p;
  return li;
}

std::shared_ptr<Communicator> init_from_env() {
  const LaunchInfo li = detect_launch();
  if (li.world_size == 1) return InProcessGroup(1).communicator(0);
  EMBER_CHECK(li.launcher != "torchrun", "the environment asks for rank ", li.rank, " of ", li.world_size,
              " (RANK/WORLD_SIZE, torchrun-style) but ember joins CPU processes through MPI: launch with "
              "`mpirun -np ", li.world_size, " ...` or `srun -n ", li.world_size, " ...` (docs/distributed.md)");
  EMBER_CHECK(mpi_built(), "launched by ", li.launcher, " as rank ", li.rank, " of ", li.world_size,
              " but this ember was built without MPI (install libopenmpi-dev and reconfigure with EMBER_MPI=ON)");
  return make_mpi_communicator(li);
}

std::shared_ptr<Communicator> init_from_env(Device device) {
  const LaunchInfo li = detect_launch();
  std::string backend = "auto";
  if (const char* b = std::getenv("EMBER_DIST_BACKEND"); b != nullptr && *b != '\0') backend = b;
  EMBER_CHECK(backend == "auto" || backend == "mpi" || backend == "nccl",
              "EMBER_DIST_BACKEND must be mpi or nccl, got '", backend, "'");
  if (li.world_size == 1) return InProcessGroup(1).communicator(0);
  if (backend == "auto") backend = device.is_cuda() && nccl_built() && !nccl_is_shim() ? "nccl" : "mpi";
  if (backend == "mpi") return init_from_env();

  EMBER_CHECK(device.is_cuda(), "EMBER_DIST_BACKEND=nccl: NCCL reduces CUDA tensors, but this process trains on ",
              device.str(), " (use --device cuda)");
  EMBER_CHECK(nccl_built(), "EMBER_DIST_BACKEND=nccl: this ember was built without NCCL");
  EMBER_CHECK(!nccl_is_shim(),
              "EMBER_DIST_BACKEND=nccl: this is the SIMT flavour, whose NCCL shim joins threads of one "
              "process only (tests); separate processes reduce through MPI (EMBER_DIST_BACKEND=mpi)");
  // Rank 0 makes the unique id; every rank gets it through the launcher's channel.
  std::vector<uint8_t> id = li.rank == 0 ? nccl_unique_id() : std::vector<uint8_t>(kNcclUniqueIdBytes);
  if (li.launcher == "mpirun" || li.launcher == "slurm") {
    EMBER_CHECK(mpi_built(), "launched by ", li.launcher, " as rank ", li.rank, " of ", li.world_size,
                " but this ember was built without MPI, which shares NCCL's id under ", li.launcher,
                " (install libopenmpi-dev, or launch torchrun-style with MASTER_ADDR/MASTER_PORT)");
    std::shared_ptr<Communicator> mpi = make_mpi_communicator(li);
    Tensor t = from_vector<uint8_t>(id);
    mpi->broadcast(t, 0);
    id = t.to_vector<uint8_t>();
  } else {
    const std::chrono::milliseconds timeout = default_timeout();
    id = rendezvous_broadcast(li, "nccl-id", id, timeout);
  }
  return make_nccl_communicator(li.rank, li.world_size, device.index, id);
}

}  // namespace ember::parallel
