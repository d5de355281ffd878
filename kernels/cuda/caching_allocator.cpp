// The caching allocator's policy (kernels/cuda/caching_allocator.h): host code only, so it is built
// and tested without a GPU.
#include "kernels/cuda/caching_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>

namespace megatrain::cuda {
namespace {

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }
uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

std::string AllocatorStats::str() const {
  return fmt::format(
      "allocated {:.1f} MiB (peak {:.1f}), reserved {:.1f} MiB (peak {:.1f}), cached {:.1f} MiB, "
      "{} device mallocs, {} device frees, {} out-of-memory retries",
      mib(allocated), mib(peak_allocated), mib(reserved), mib(peak_reserved), mib(cached()), device_mallocs,
      device_frees, oom_retries);
}

bool CachingAllocator::BySize::operator()(const Block* a, const Block* b) const {
  return std::make_tuple(address(a->stream), a->size, address(a->ptr)) <
         std::make_tuple(address(b->stream), b->size, address(b->ptr));
}

CachingAllocator::CachingAllocator(RawAllocator raw) : raw_(std::move(raw)) {
  if (!raw_.malloc || !raw_.free) throw Error("CachingAllocator needs both a malloc and a free function");
}

CachingAllocator::~CachingAllocator() {
  for (Block* head : segments_) {
    try {
      raw_.free(head->ptr);
    } catch (const std::exception&) {
      // A destructor cannot throw; a failed cudaFree is a sticky context error that the next
      // checked CUDA call reports.
    }
    for (Block* b = head; b;) delete std::exchange(b, b->next);
  }
}

void* CachingAllocator::allocate(size_t bytes, void* stream) {
  if (bytes == 0) return nullptr;
  const size_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  std::lock_guard lock(mutex_);
  Block* block = find_free(stream, size, small);
  if (!block) {
    const size_t segment = small ? kSmallSegment : (size + kLargeRound - 1) / kLargeRound * kLargeRound;
    block = new_segment(stream, segment, small);
  }
  split(block, size);
  block->allocated = true;
  in_use_.emplace(block->ptr, block);
  stats_.allocated += static_cast<int64_t>(block->size);
  update_peaks();
  return block->ptr;
}

void CachingAllocator::deallocate(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = in_use_.find(ptr);
  if (it == in_use_.end())
    throw Error(fmt::format("CachingAllocator::deallocate of a pointer it did not hand out, or freed twice ({})",
                            ptr));
  Block* block = it->second;
  in_use_.erase(it);
  stats_.allocated -= static_cast<int64_t>(block->size);
  block->allocated = false;
  Pool& free_pool = pool(block->small);
  if (block->prev && !block->prev->allocated) {
    Block* prev = block->prev;
    free_pool.erase(prev);
    merge_into(prev, block);
    block = prev;
  }
  if (block->next && !block->next->allocated) {
    free_pool.erase(block->next);
    merge_into(block, block->next);
  }
  free_pool.insert(block);
}

void CachingAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  release_segments();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peaks() {
  std::lock_guard lock(mutex_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

CachingAllocator::Block* CachingAllocator::find_free(void* stream, size_t size, bool small) {
  Pool& p = pool(small);
  Block key{stream, nullptr, size, small};
  auto it = p.lower_bound(&key);
  if (it == p.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  p.erase(it);
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(void* stream, size_t size, bool small) {
  void* ptr = raw_.malloc(size);
  if (!ptr) {
    // Out of device memory: what other streams and sizes keep cached may be enough.
    ++stats_.oom_retries;
    release_segments();
    ptr = raw_.malloc(size);
  }
  if (!ptr)
    throw OutOfMemory(fmt::format(
        "out of device memory: a segment of {:.1f} MiB could not be allocated, even after giving back "
        "every cached segment. Memory: {}. Lower the micro-batch size or the sequence length, turn on "
        "activation recompute, or use more tensor/pipeline parallelism",
        mib(static_cast<int64_t>(size)), stats_.str()));
  ++stats_.device_mallocs;
  stats_.reserved += static_cast<int64_t>(size);
  Block* block = new Block{stream, static_cast<char*>(ptr), size, small};
  segments_.insert(block);
  return block;
}

void CachingAllocator::split(Block* block, size_t size) {
  const size_t rest = block->size - size;
  if (block->small ? rest < kRound : rest <= kSmallSize) return;  // keep the tail with the block
  Block* tail = new Block{block->stream, block->ptr + size, rest, block->small};
  tail->prev = block;
  tail->next = block->next;
  if (block->next) block->next->prev = tail;
  block->next = tail;
  block->size = size;
  pool(block->small).insert(tail);
}

void CachingAllocator::merge_into(Block* keep, Block* gone) {
  keep->size += gone->size;
  keep->next = gone->next;
  if (gone->next) gone->next->prev = keep;
  delete gone;
}

void CachingAllocator::release_segments() {
  for (Pool* p : {&small_free_, &large_free_}) {
    for (auto it = p->begin(); it != p->end();) {
      Block* b = *it;
      if (b->prev || b->next) {  // part of a segment still in use
        ++it;
        continue;
      }
      it = p->erase(it);
      segments_.erase(b);
      raw_.free(b->ptr);
      ++stats_.device_frees;
      stats_.reserved -= static_cast<int64_t>(b->size);
      delete b;
    }
  }
}

void CachingAllocator::update_peaks() {
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
}

}  // namespace megatrain::cuda
