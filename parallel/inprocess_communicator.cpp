// In-process ranks: a rendezvous in shared memory per collective (inprocess_communicator.h).

#include "inprocess_communicator.h"

#include <condition_variable>
#include <mutex>
#include <sstream>
#include <thread>

#include "../core/error.h"

namespace ember::parallel {

namespace detail {

// One collective at a time ("the round", = the sequence number every rank is at):
//   1. each rank waits until the group reaches its round, posts its Collective, and counts in;
//   2. the last rank in compares the headers and computes the result (sum, snapshot of the
//      root's tensor, or snapshots of every input) — snapshots, because a rank may reuse its
//      tensor as soon as its own Work finished, while a peer is still copying;
//   3. each rank copies the result into its own tensors (outside the lock, in parallel);
//   4. each rank counts out; the last one out opens the next round.
struct InProcessState {
  explicit InProcessState(int n) : world(n), slots(n, nullptr), created(n, false), left(n, false) {}

  const int world;
  std::mutex mu;
  std::condition_variable cv;
  int64_t round = 0;
  int arrived = 0, departed = 0;
  bool result_ready = false;
  std::vector<Collective*> slots;
  Tensor result;
  std::vector<Tensor> gathered;
  std::vector<bool> created, left;
  std::string failure;

  // Ranks that have not posted to the current round.
  std::string missing() const {
    std::ostringstream os;
    for (int r = 0; r < world; ++r)
      if (slots[r] == nullptr) os << (os.tellp() > 0 ? ", " : "") << r;
    return os.str();
  }
  // A rank that left before posting to the current round.
  int left_missing() const {
    for (int r = 0; r < world; ++r)
      if (left[r] && slots[r] == nullptr) return r;
    return -1;
  }
};

}  // namespace detail

namespace {

class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(int rank, std::shared_ptr<detail::InProcessState> state)
      : Communicator(rank, state->world), state_(std::move(state)) {}

  ~InProcessCommunicator() override {
    shutdown();  // queued collectives run (or fail) first
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->left[rank()] = true;
    }
    state_->cv.notify_all();
  }

  std::string backend() const override { return "inprocess"; }

 protected:
  void run(Collective& c) override {
    detail::InProcessState& s = *state_;
    const auto deadline = std::chrono::steady_clock::now() + timeout();
    const double timeout_s = static_cast<double>(timeout().count()) / 1000.0;
    std::unique_lock<std::mutex> lock(s.mu);
    auto fail = [&](const std::string& msg) {
      if (s.failure.empty()) s.failure = msg;
      s.cv.notify_all();
      throw Error(s.failure);
    };

    // 1. Wait for the group to reach this collective, then post it.
    if (!s.cv.wait_until(lock, deadline, [&] { return !s.failure.empty() || s.round == c.header.sequence; })) {
      std::ostringstream os;
      os << "timed out after " << timeout_s << " s waiting for the group to finish collective #" << s.round
         << " (ranks still missing from it: " << s.missing() << ")";
      fail(os.str());
    }
    if (!s.failure.empty()) fail(s.failure);
    s.slots[rank()] = &c;
    s.arrived += 1;

    if (s.arrived == s.world) {
      // 2. The last rank in: check, then compute the result.
      std::vector<CollectiveHeader> headers;
      for (const Collective* p : s.slots) headers.push_back(p->header);
      if (std::string m = compare_headers(headers); !m.empty()) fail(m);
      try {
        compute(s, c.header);
      } catch (const std::exception& e) {
        fail(std::string("computing the result: ") + e.what());
      }
      s.result_ready = true;
      s.cv.notify_all();
    } else if (!s.cv.wait_until(lock, deadline,
                                [&] { return !s.failure.empty() || s.result_ready || s.left_missing() >= 0; })) {
      std::ostringstream os;
      os << "timed out after " << timeout_s << " s: ranks " << s.missing() << " never joined it";
      fail(os.str());
    }
    if (!s.failure.empty()) fail(s.failure);
    if (!s.result_ready) {
      std::ostringstream os;
      os << "rank " << s.left_missing() << " left the group (its communicator was destroyed) before joining it";
      fail(os.str());
    }

    // 3. Copy the result into this rank's tensors.
    lock.unlock();
    switch (c.header.kind) {
      case CollectiveKind::all_reduce:
        c.tensor.copy_(s.result);
        break;
      case CollectiveKind::broadcast:
        if (rank() != c.header.root) c.tensor.copy_(s.result);
        break;
      case CollectiveKind::all_gather:
        for (int r = 0; r < s.world; ++r) c.outputs[r].copy_(s.gathered[r]);
        break;
      case CollectiveKind::barrier:
        break;
    }
    lock.lock();

    // 4. Count out; the last one out opens the next round.
    s.departed += 1;
    if (s.departed == s.world) {
      s.arrived = s.departed = 0;
      s.result_ready = false;
      s.result = Tensor();
      s.gathered.clear();
      std::fill(s.slots.begin(), s.slots.end(), nullptr);
      s.round += 1;
      s.cv.notify_all();
    }
  }

 private:
  // Runs under the lock, on the last rank in. Sums in rank order, so every rank (and every run)
  // gets bit-identical results.
  static void compute(detail::InProcessState& s, const CollectiveHeader& h) {
    switch (h.kind) {
      case CollectiveKind::all_reduce: {
        const Tensor& t0 = s.slots[0]->tensor;
        if (!t0.is_floating_point()) {
          // Integer sums (counters, bool flags): exactly, in int64 on the host.
          std::vector<int64_t> acc = t0.to_vector<int64_t>();
          for (int r = 1; r < s.world; ++r) {
            const std::vector<int64_t> v = s.slots[r]->tensor.to_vector<int64_t>();
            for (size_t k = 0; k < acc.size(); ++k) acc[k] += v[k];
          }
          s.result = from_vector<int64_t>(acc, t0.shape()).to(t0.device(), t0.dtype());
          break;
        }
        Tensor acc = t0.contiguous().clone();
        for (int r = 1; r < s.world; ++r) acc.add_(s.slots[r]->tensor.to(acc.device()));
        if (s.slots[0]->op == ReduceOp::avg) acc.div_(static_cast<double>(s.world));
        s.result = acc;
        break;
      }
      case CollectiveKind::broadcast:
        s.result = s.slots[h.root]->tensor.contiguous().clone();
        break;
      case CollectiveKind::all_gather:
        for (int r = 0; r < s.world; ++r) s.gathered.push_back(s.slots[r]->tensor.contiguous().clone());
        break;
      case CollectiveKind::barrier:
        break;
    }
  }

  std::shared_ptr<detail::InProcessState> state_;
};

}  // namespace

InProcessGroup::InProcessGroup(int world_size) {
  EMBER_CHECK(world_size >= 1, "InProcessGroup: world size must be at least 1, got ", world_size);
  state_ = std::make_shared<detail::InProcessState>(world_size);
}

int InProcessGroup::world_size() const { return state_->world; }

std::shared_ptr<Communicator> InProcessGroup::communicator(int rank) {
  EMBER_CHECK(rank >= 0 && rank < state_->world, "InProcessGroup: rank ", rank, " is outside a world of size ",
              state_->world);
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    EMBER_CHECK(!state_->created[rank], "InProcessGroup: the communicator of rank ", rank, " was already created");
    state_->created[rank] = true;
  }
  return std::make_shared<InProcessCommunicator>(rank, state_);
}

std::vector<std::string> InProcessGroup::run(const std::function<void(Communicator&)>& fn) {
  const int n = state_->world;
  std::vector<std::shared_ptr<Communicator>> comms;
  for (int r = 0; r < n; ++r) comms.push_back(communicator(r));
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::shared_ptr<Communicator> comm = std::move(comms[r]);
      try {
        fn(*comm);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "unknown error";
      }
      comm.reset();  // leave the group now: peers waiting on this rank fail instead of hanging
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

}  // namespace ember::parallel
