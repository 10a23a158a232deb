#pragma once
// Ranks as threads, for the tests of collectives: run_ranks runs a function on `world` threads,
// each with its own communicator (in-process ranks; tests/cuda/nccl_ranks.h makes NCCL ones), and
// returns each rank's error ("" for success); all_ok checks them on the test's thread.
//
// Catch's assertions are not thread-safe: code running on a rank's thread records failed
// expectations with EXPECT, and run_ranks reports them as that rank's error. (On the test's own
// thread EXPECT is a Catch FAIL_CHECK.)

#include <ember/parallel/communicator.h>
#include <ember/parallel/inprocess_communicator.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace ember::testing::ranks {

using RankFn = std::function<void(std::shared_ptr<ember::parallel::Communicator>)>;
// Makes rank r's communicator, on rank r's thread (NCCL ranks join there, all at once).
using MakeCommunicator = std::function<std::shared_ptr<ember::parallel::Communicator>(int rank)>;

// The failed expectations of the rank running on this thread (null on the test's thread).
inline thread_local std::vector<std::string>* t_failed = nullptr;

inline void expect_failed(int line, const char* what) {
  const std::string message = "line " + std::to_string(line) + ": " + what;
  if (t_failed != nullptr) {
    t_failed->push_back(message);
  } else {
    FAIL_CHECK(message);
  }
}

#define EXPECT(...)                                                                     \
  do {                                                                                  \
    if (!(__VA_ARGS__)) ::ember::testing::ranks::expect_failed(__LINE__, #__VA_ARGS__); \
  } while (0)

// Runs fn on `world` threads, rank r with make(r) and the given timeout; returns each rank's error
// (what fn threw, then its failed EXPECTs). A rank's communicator is destroyed when its fn returns
// or throws, so its peers never hang on it.
inline std::vector<std::string> run_ranks_with(int world, const MakeCommunicator& make, const RankFn& fn,
                                               std::chrono::milliseconds timeout) {
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::vector<std::string> failed;
      t_failed = &failed;
      try {
        std::shared_ptr<ember::parallel::Communicator> c = make(r);
        c->set_timeout(timeout);
        fn(std::move(c));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
      for (const std::string& f : failed) errors[r] += (errors[r].empty() ? "failed: " : "; ") + f;
      t_failed = nullptr;
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// `world` in-process ranks (parallel::InProcessGroup).
inline std::vector<std::string> run_ranks(int world, const RankFn& fn,
                                          std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  ember::parallel::InProcessGroup group(world);
  std::vector<std::shared_ptr<ember::parallel::Communicator>> comms;
  for (int r = 0; r < world; ++r) comms.push_back(group.communicator(r));
  return run_ranks_with(
      world, [&](int r) { return std::move(comms[r]); }, fn, timeout);
}

// True when every rank succeeded; otherwise reports each rank's error and returns false.
inline bool all_ok(const std::vector<std::string>& errors) {
  bool ok = true;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) {
      UNSCOPED_INFO("rank " << r << ": " << errors[r]);
      ok = false;
    }
  }
  return ok;
}

}  // namespace ember::testing::ranks
