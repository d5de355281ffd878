// MT_HOST_DEVICE marks a function of a plain C++ header (kernels/rng.h, kernels/half.h) that the
// CUDA kernels call too: `__host__ __device__` when nvcc compiles it, nothing for the host
// compiler. So those headers stay free of CUDA headers, and the GPU computes the same bits as the
// CPU (dropout masks, 16-bit roundings).
#pragma once

#ifdef __CUDACC__
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif
