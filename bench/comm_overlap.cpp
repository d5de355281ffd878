// How well a ~64 MB float all-reduce overlaps with computation on the same rank, for the two ways
// of making an asynchronous collective progress (run on 2 ranks):
//   progress thread — the library's Comm (parallel/comm_mpi.cpp): MPI_Iallreduce issued by the
//                     caller, a progress thread polling MPI_Testall with a sleep between polls
//                     (once per --poll-us value);
//   comm thread     — written here with raw MPI: a thread that runs a blocking MPI_Allreduce.
// Compute is single-threaded float work on a cache-resident array, calibrated on rank 0 to last
// about as long as the all-reduce alone. For each approach it prints the median over --reps of:
// compute alone, comm alone, both overlapped (issue, compute, wait) and the exposed wait (time
// blocked in wait after the compute). Run with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset
// (bench/RESULTS.md "Communication progress").
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include "bench/measure.h"
#include "parallel/comm.h"

using namespace megatrain;
using bench::median;
using Clock = std::chrono::steady_clock;

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

volatile float g_sink;

// `iters` passes of a multiply-add over a 256 KiB array (stays in L2: no memory-bandwidth fight
// with the all-reduce, so what is measured is the fight for the core).
void compute(int iters) {
  static std::vector<float> a(64 * 1024, 1.0f);
  for (int k = 0; k < iters; ++k)
    for (float& x : a) x = x * 0.9999f + 0.0001f;
  g_sink = a[17];
}

// An asynchronous all-reduce: start() issues it, finish() waits for it.
struct Approach {
  std::string name;
  std::function<void()> start, finish;
};

struct Timings {
  double compute = 0, comm = 0, overlapped = 0, exposed = 0;
};

Timings measure(const Approach& a, int iters, int reps) {
  std::vector<double> tc, tm, to, te;
  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    auto t0 = Clock::now();
    compute(iters);
    tc.push_back(ms_between(t0, Clock::now()));

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = Clock::now();
    a.start();
    a.finish();
    tm.push_back(ms_between(t0, Clock::now()));

    MPI_Barrier(MPI_COMM_WORLD);
    t0 = Clock::now();
    a.start();
    compute(iters);
    const auto t1 = Clock::now();
    a.finish();
    const auto t2 = Clock::now();
    to.push_back(ms_between(t0, t2));
    te.push_back(ms_between(t1, t2));
  }
  return {median(tc), median(tm), median(to), median(te)};
}

}  // namespace

int main(int argc, char** argv) {
  MpiRuntime mpi(&argc, &argv);
  CLI::App app{"all-reduce / compute overlap: progress thread vs communication thread"};
  double mb = 64;
  int reps = 5;
  std::vector<int> poll_us = {50, 500};
  app.add_option("--mb", mb, "all-reduce size in MB (floats)");
  app.add_option("--reps", reps, "repetitions per measurement (median reported)");
  app.add_option("--poll-us", poll_us, "progress-thread poll intervals to measure");
  CLI11_PARSE(app, argc, argv);

  const Comm world = Comm::world();
  const auto n = static_cast<int64_t>(mb * 1e6 / sizeof(float));
  std::vector<float> buf(static_cast<size_t>(n), 1.0f);

  std::vector<Approach> approaches;
  std::vector<Comm> comms;
  for (int us : poll_us) comms.push_back(world.split(0, world.rank(), "bench", CommOptions{.progress_poll_us = us}));
  auto work = std::make_shared<Work>();
  for (size_t i = 0; i < comms.size(); ++i)
    approaches.push_back({fmt::format("progress thread, poll {} us", poll_us[i]),
                          [&, i, work] { *work = comms[i].all_reduce(buf.data(), n); }, [work] { work->wait(); }});
  auto thread = std::make_shared<std::thread>();
  approaches.push_back({"comm thread, blocking MPI_Allreduce",
                        [&, thread] {
                          *thread = std::thread([&] {
                            for (int64_t off = 0; off < n; off += INT_MAX)
                              MPI_Allreduce(MPI_IN_PLACE, buf.data() + off, static_cast<int>(std::min<int64_t>(INT_MAX, n - off)),
                                            MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
                          });
                        },
                        [thread] { thread->join(); }});

  // Calibrate: compute iterations whose time matches the all-reduce alone (rank 0 decides).
  const Timings probe = measure(approaches.front(), 1, reps);
  int iters = std::max(1, static_cast<int>(probe.comm / std::max(probe.compute, 1e-3)));
  MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);

  if (world.rank() == 0)
    fmt::print("ranks {}  all-reduce {:.0f} MB  compute {} passes  median of {}\n{:<38} {:>9} {:>9} {:>11} {:>9} {:>8}\n",
               world.size(), mb, iters, reps, "approach", "compute", "comm", "overlapped", "exposed", "hidden");
  for (const Approach& a : approaches) {
    const Timings t = measure(a, iters, reps);
    // hidden: the share of the shorter of the two that overlapping saved (1 = perfect, 0 = serial).
    const double hidden = (t.compute + t.comm - t.overlapped) / std::min(t.compute, t.comm);
    if (world.rank() == 0)
      fmt::print("{:<38} {:>7.1f}ms {:>7.1f}ms {:>9.1f}ms {:>7.1f}ms {:>8.2f}\n", a.name, t.compute, t.comm,
                 t.overlapped, t.exposed, hidden);
  }
  return 0;
}
