// The fiber scheduler behind tests/simt/simt.h: one block at a time, its threads as ucontext
// fibers switched at synchronisation points (a barrier with a generation counter per block and per
// warp).
#include "tests/simt/simt.h"

#include <ucontext.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace simt {
namespace {

constexpr size_t kStackBytes = 128 * 1024;
constexpr int kMaxThreads = 1024;
constexpr size_t kMaxDynamicSmem = 227 * 1024;  // H100's per-block opt-in limit

enum class State { ready, block_barrier, warp_barrier, done };

struct Fiber {
  ucontext_t ctx{};
  std::unique_ptr<char[]> stack;
  uint3 idx{};
  State state = State::ready;
};

struct Warp {
  int lanes = 0;            // threads of the block in this warp
  unsigned exited = 0;      // lanes that returned
  unsigned arrived = 0;     // lanes waiting at the current exchange
  unsigned mask = 0;        // the current exchange's mask
  unsigned generation = 0;  // exchanges completed; deposits alternate between two slot sets
  uint64_t slots[2][32]{};
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  int live = 0;
  int at_barrier = 0;
  std::vector<unsigned char> smem;
  size_t smem_bytes = 0;
  int current = -1;
  ucontext_t scheduler{};
  const std::function<void()>* body = nullptr;
  std::string where;
};

Block* g_block = nullptr;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("SIMT emulation, " + (g_block ? g_block->where : std::string("launch")) + ": " + what);
}

Fiber& self() { return g_block->fibers[static_cast<size_t>(g_block->current)]; }
int self_lane() { return g_block->current % warpSize; }
Warp& self_warp() { return g_block->warps[static_cast<size_t>(g_block->current / warpSize)]; }

void yield() { swapcontext(&self().ctx, &g_block->scheduler); }

void release_block_barrier(Block& b) {
  for (Fiber& f : b.fibers)
    if (f.state == State::block_barrier) f.state = State::ready;
  b.at_barrier = 0;
}

void release_warp(Block& b, size_t w) {
  Warp& warp = b.warps[w];
  for (int l = 0; l < warp.lanes; ++l) {
    Fiber& f = b.fibers[w * warpSize + static_cast<size_t>(l)];
    if (f.state == State::warp_barrier) f.state = State::ready;
  }
  warp.arrived = 0;
  warp.generation++;
}

enum class Schedule { round_robin, warps_ahead };
// SIMT_SCHEDULE=warps_ahead selects the second order of run_block (ctest runs the tests under both).
Schedule current_schedule() {
  const char* env = std::getenv("SIMT_SCHEDULE");
  return env && std::string(env) == "warps_ahead" ? Schedule::warps_ahead : Schedule::round_robin;
}

// Stored error of a fiber (exceptions may not cross swapcontext).
std::string g_fiber_error;

void fiber_main() {
  try {
    (*g_block->body)();
  } catch (const std::exception& e) {
    if (g_fiber_error.empty()) g_fiber_error = e.what();
  }
  Block& b = *g_block;
  Fiber& f = self();
  f.state = State::done;
  b.live--;
  self_warp().exited |= 1u << self_lane();
  if (b.live > 0 && b.at_barrier == b.live) release_block_barrier(b);
  // returning resumes uc_link, the scheduler
}

void check_mask(unsigned mask) {
  Warp& w = self_warp();
  unsigned exists = w.lanes == 32 ? 0xffffffffu : ((1u << w.lanes) - 1u);
  unsigned lane_bit = 1u << self_lane();
  if (!(mask & lane_bit)) fail("lane " + std::to_string(self_lane()) + " is not in its warp operation's mask");
  if (mask & ~exists) fail("warp operation's mask names lanes past the block's last thread");
  if (mask & w.exited) fail("warp operation's mask names a lane that has exited");
}

// Deposits bits and waits until every lane of mask has; returns the slot set used.
uint64_t* warp_gather(unsigned mask, uint64_t bits) {
  check_mask(mask);
  Warp& w = self_warp();
  if (w.arrived != 0 && w.mask != mask) fail("lanes of one warp reached warp operations with different masks");
  w.mask = mask;
  uint64_t* slots = w.slots[w.generation & 1u];
  slots[self_lane()] = bits;
  w.arrived |= 1u << self_lane();
  self().state = State::warp_barrier;
  if (w.arrived == mask) release_warp(*g_block, static_cast<size_t>(g_block->current / warpSize));
  yield();
  return slots;
}

void run_block(Block& b, std::vector<Fiber>& pool, int nthreads) {
  b.live = nthreads;
  b.at_barrier = 0;
  b.fibers.resize(static_cast<size_t>(nthreads));
  for (int t = 0; t < nthreads; ++t) {
    Fiber& f = b.fibers[static_cast<size_t>(t)];
    if (!pool[static_cast<size_t>(t)].stack) pool[static_cast<size_t>(t)].stack = std::make_unique_for_overwrite<char[]>(kStackBytes);
    f.stack = std::move(pool[static_cast<size_t>(t)].stack);
    f.state = State::ready;
    f.idx = uint3{static_cast<unsigned>(t) % blockDim.x, (static_cast<unsigned>(t) / blockDim.x) % blockDim.y,
                  static_cast<unsigned>(t) / (blockDim.x * blockDim.y)};
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = &b.scheduler;
    makecontext(&f.ctx, fiber_main, 0);
  }
  b.warps.assign(static_cast<size_t>((nthreads + warpSize - 1) / warpSize), Warp{});
  for (size_t w = 0; w < b.warps.size(); ++w)
    b.warps[w].lanes = std::min(warpSize, nthreads - static_cast<int>(w) * warpSize);
  std::memset(b.smem.data(), 0xFF, b.smem_bytes);
  const int nwarps = static_cast<int>(b.warps.size());
  const Schedule schedule = current_schedule();
  while (b.live > 0) {
    bool progressed = false;
    // Runs every ready thread of warps [w0, w1) once; true if one ran.
    const auto pass = [&](int w0, int w1) {
      bool ran = false;
      for (int t = w0 * warpSize; t < std::min(nthreads, w1 * warpSize) && g_fiber_error.empty(); ++t) {
        Fiber& f = b.fibers[static_cast<size_t>(t)];
        if (f.state != State::ready) continue;
        b.current = t;
        threadIdx = f.idx;
        swapcontext(&b.scheduler, &f.ctx);
        ran = true;
      }
      return ran;
    };
    if (schedule == Schedule::round_robin) {
      progressed = pass(0, nwarps);
    } else {
      // Each warp as far as it gets (to a __syncthreads, or waiting on nothing but itself) before
      // the next one starts, the last warp first: a warp runs ahead of the others as a GPU's may.
      for (int i = 0; i < nwarps && g_fiber_error.empty(); ++i) {
        const int w = nwarps - 1 - i;
        while (pass(w, w + 1)) progressed = true;
      }
    }
    if (!g_fiber_error.empty()) break;
    if (!progressed) {
      int at_warp = 0;
      for (const Fiber& f : b.fibers) at_warp += f.state == State::warp_barrier;
      g_fiber_error = "deadlock: " + std::to_string(b.at_barrier) + " of " + std::to_string(b.live) +
                      " live threads wait at __syncthreads, " + std::to_string(at_warp) +
                      " at a warp operation whose other lanes never arrive";
    }
  }
  for (int t = 0; t < nthreads; ++t) pool[static_cast<size_t>(t)].stack = std::move(b.fibers[static_cast<size_t>(t)].stack);
  b.current = -1;
}

}  // namespace

void launch(dim3 grid, dim3 block, size_t dynamic_smem_bytes, const std::function<void()>& body) {
  const long long nthreads = static_cast<long long>(block.x) * block.y * block.z;
  if (nthreads < 1 || nthreads > kMaxThreads)
    throw std::runtime_error("SIMT emulation: a block of " + std::to_string(nthreads) + " threads (1 to 1024 allowed)");
  if (dynamic_smem_bytes > kMaxDynamicSmem)
    throw std::runtime_error("SIMT emulation: " + std::to_string(dynamic_smem_bytes) + " bytes of dynamic shared memory");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) throw std::runtime_error("SIMT emulation: an empty grid");
  if (g_block) throw std::runtime_error("SIMT emulation: a launch from inside a kernel");
  static std::vector<Fiber> pool(kMaxThreads);
  Block b;
  b.body = &body;
  b.smem.resize(dynamic_smem_bytes + 16);
  b.smem_bytes = dynamic_smem_bytes;
  gridDim = grid;
  blockDim = block;
  g_fiber_error.clear();
  g_block = &b;
  for (unsigned z = 0; z < grid.z && g_fiber_error.empty(); ++z)
    for (unsigned y = 0; y < grid.y && g_fiber_error.empty(); ++y)
      for (unsigned x = 0; x < grid.x && g_fiber_error.empty(); ++x) {
        blockIdx = uint3{x, y, z};
        b.where = "block (" + std::to_string(x) + ", " + std::to_string(y) + ", " + std::to_string(z) + ")";
        run_block(b, pool, static_cast<int>(nthreads));
      }
  g_block = nullptr;
  if (!g_fiber_error.empty()) {
    std::string e = "SIMT emulation, " + b.where + ": " + g_fiber_error;
    g_fiber_error.clear();
    throw std::runtime_error(e);
  }
}

void* dynamic_shared() {
  if (!g_block) fail("dynamic shared memory outside a kernel");
  return g_block->smem.data();
}
size_t dynamic_shared_bytes() { return g_block ? g_block->smem_bytes : 0; }

void syncthreads() {
  Block& b = *g_block;
  self().state = State::block_barrier;
  if (++b.at_barrier == b.live) release_block_barrier(b);
  yield();
}

unsigned lane_id() { return static_cast<unsigned>(self_lane()); }

uint64_t warp_exchange(unsigned mask, uint64_t bits, int src_lane, int width) {
  if (width < 1 || width > warpSize || (width & (width - 1)))
    fail("warp shuffle width " + std::to_string(width) + " (a power of two up to 32)");
  const int lane = self_lane();
  uint64_t* slots = warp_gather(mask, bits);
  const bool same_segment = src_lane >= 0 && src_lane / width == lane / width && src_lane < warpSize;
  if (!same_segment) return bits;
  if (!(mask & (1u << src_lane)))
    fail("lane " + std::to_string(lane) + " reads lane " + std::to_string(src_lane) + ", which is not in the mask");
  return slots[src_lane];
}

unsigned warp_ballot(unsigned mask, bool predicate) {
  uint64_t* slots = warp_gather(mask, predicate ? 1 : 0);
  unsigned out = 0;
  for (int l = 0; l < warpSize; ++l)
    if ((mask & (1u << l)) && slots[l]) out |= 1u << l;
  return out;
}

void syncwarp(unsigned mask) { warp_gather(mask, 0); }

}  // namespace simt
