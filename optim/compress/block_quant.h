// Block-wise symmetric int8 quantization (ZeRO++, Wang et al. 2023: qwZ and qgZ): n float32 values
// in blocks of `block` consecutive values (the last one shorter when block does not divide n), each
// block as one float32 scale s = max|x| / 127 and one int8 code per value, q = x / s rounded to
// nearest (ties to even), so x̂ = q·s differs from x by at most s/2 (plus the float32 rounding of
// the product q·s, half an ulp of x̂). An all-zero block has s = 0 and codes 0; a block holding an
// Inf or NaN has s = NaN and codes 0, so every value it dequantizes to is NaN (a non-finite
// gradient stays visible after the exchange).
// [Note: packed int8 layout] A packed run of n values is, in order: the blocks' scales
// (ceil(n / block) float32, native byte order), the n int8 codes, then zero bytes up to a multiple
// of 4. packed_bytes(n) = 4·ceil(n / block) + 4·ceil(n / 4): runs concatenate with every scale on a
// 4-byte boundary, and a run is a whole number of 4-byte words (what an all-to-all of float32
// words carries).
#pragma once
#include <cstdint>

namespace megatrain {

constexpr int64_t kQuantBlockDefault = 256;  // DeepSpeed's default group size for qwZ/qgZ

int64_t quant_blocks(int64_t n, int64_t block);
int64_t quant_packed_bytes(int64_t n, int64_t block);
// out: quant_packed_bytes(n, block) bytes; in: n floats.
void quant_pack(uint8_t* out, const float* in, int64_t n, int64_t block);
// out: n floats, x̂ of each value of the packed run `in`.
void quant_unpack(float* out, const uint8_t* in, int64_t n, int64_t block);
// out[i] += x̂[i]: one term of a sum taken in a fixed order.
void quant_unpack_add(float* out, const uint8_t* in, int64_t n, int64_t block);

}  // namespace megatrain
