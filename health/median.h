// The median the health checks score with: the middle value, or the mean of the two middle values
// when there are an even number; 0 for none.
#pragma once
#include <vector>

namespace megatrain {

// Out of line: inlined into health/selfcheck.cpp's gemm check, GCC 12 at -O3 -march=native on an
// AVX-512 CPU (Zen 4) reports a false -Wfree-nonheap-object on the copy of `v`.
double median(std::vector<double> v);

}  // namespace megatrain
