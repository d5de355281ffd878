// FNV-1a, 64-bit: a fast, non-cryptographic hash of bytes, for names keyed by content (the sample-index
// cache, memory-snapshot layout folders) and the sample log's digests. Pass a previous result as `h`
// to continue hashing across pieces.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace megatrain {

inline constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ull, kFnv1aPrime = 0x100000001b3ull;

inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = kFnv1aOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnv1aPrime;
  return h;
}

inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aOffset) { return fnv1a(s.data(), s.size(), h); }

}  // namespace megatrain
