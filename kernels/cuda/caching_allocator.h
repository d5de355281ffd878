// Caching allocator for device memory. Freed blocks go back to a pool of their stream and are
// handed out again, so a training step calls the device allocator (cudaMalloc: slow, and it
// synchronises the device) only while the pools warm up. The policy is PyTorch's
// CUDACachingAllocator, simplified:
//  - sizes round up to kRound (512) bytes; requests of at most kSmallSize (1 MiB) are carved from
//    kSmallSegment (2 MiB) segments, larger ones get a segment of their size rounded up to
//    kLargeRound (2 MiB);
//  - a request takes the smallest free block of its pool (small or large) and stream that fits; the
//    rest is split off as a free block when worth keeping (≥ kRound small, > kSmallSize large);
//  - a freed block merges with the free blocks beside it in its segment;
//  - a block belongs to the stream it was allocated on and is reused only there: a block used on a
//    second stream must be ordered with an Event (kernels/device.h) before it is freed;
//  - when the device allocator fails, every wholly free segment is given back and the request is
//    tried once more; if that fails too, OutOfMemory names the request and the stats.
// The device allocator is injected (RawAllocator), so the whole policy is tested on the CPU
// (tests/kernels/test_caching_allocator.cpp); cuda_raw_allocator() is cudaMalloc/cudaFree.
// Invariant: reserved = Σ segment sizes = allocated + bytes cached in free blocks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "kernels/check.h"

namespace megatrain::cuda {

// The device allocator underneath: malloc returns nullptr when the device is out of memory (and
// throws on any other failure); free takes what malloc returned.
struct RawAllocator {
  std::function<void*(size_t bytes)> malloc;
  std::function<void(void* ptr)> free;
};
// cudaMalloc / cudaFree on the current device (kernels/cuda/device_memory.cpp; CUDA builds only).
RawAllocator cuda_raw_allocator();

// Byte counts for the memory accounting (trainer/metrics.h reports them as device memory).
struct AllocatorStats {
  int64_t allocated = 0;       // bytes in blocks handed out (requests rounded up, plus unsplit tails)
  int64_t reserved = 0;        // bytes in segments taken from the device allocator
  int64_t peak_allocated = 0;  // maxima since construction or reset_peaks()
  int64_t peak_reserved = 0;
  int64_t device_mallocs = 0;  // calls to the device allocator that succeeded, and frees
  int64_t device_frees = 0;
  int64_t oom_retries = 0;  // requests retried after giving the cache back
  int64_t cached() const { return reserved - allocated; }
  std::string str() const;
};

class OutOfMemory : public Error {
 public:
  using Error::Error;
};

class CachingAllocator {
 public:
  static constexpr size_t kRound = 512;
  static constexpr size_t kSmallSize = size_t{1} << 20;
  static constexpr size_t kSmallSegment = size_t{2} << 20;
  static constexpr size_t kLargeRound = size_t{2} << 20;

  explicit CachingAllocator(RawAllocator raw);
  // Gives every segment back: destroy it only once no kernel uses its memory any more.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // At least `bytes` bytes (kRound-aligned when the device allocator's segments are) for use on
  // `stream` (a cudaStream_t, or any tag); nullptr for 0 bytes. Throws OutOfMemory.
  void* allocate(size_t bytes, void* stream);
  // Returns a pointer from allocate() to its stream's pool; nullptr is ignored.
  void deallocate(void* ptr);
  // Gives the wholly free segments back to the device allocator (PyTorch's empty_cache).
  void release_cached();
  AllocatorStats stats() const;
  void reset_peaks();

  static size_t round_size(size_t bytes) { return (bytes + kRound - 1) / kRound * kRound; }

 private:
  // A piece of a segment; prev/next are its neighbours in the segment, in address order.
  struct Block {
    void* stream;
    char* ptr;
    size_t size;
    bool small;
    bool allocated = false;
    Block* prev = nullptr;
    Block* next = nullptr;
  };
  struct BySize {  // best fit: the smallest block of the stream that fits, then the lowest address
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySize>;

  Pool& pool(bool small) { return small ? small_free_ : large_free_; }
  Block* find_free(void* stream, size_t size, bool small);
  Block* new_segment(void* stream, size_t size, bool small);
  void split(Block* block, size_t size);
  void merge_into(Block* keep, Block* gone);
  void release_segments();
  void update_peaks();

  RawAllocator raw_;
  mutable std::mutex mutex_;
  Pool small_free_, large_free_;
  std::unordered_map<void*, Block*> in_use_;  // by pointer
  std::set<Block*> segments_;                 // each segment's first block (never merged away)
  AllocatorStats stats_;
};

}  // namespace megatrain::cuda
