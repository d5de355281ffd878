// Every rank must train with the same resolved config (docs/robustness.md R19; DeepSpeed's tag
// validation): a rank given other flags, another file or an old binary would issue collectives of
// other sizes and hang or corrupt the job. After resolving, the ranks compare the CRC-32 of
// the resolved TOML (one all-gather); when they differ, every rank throws InputError (exit code 64)
// "CONFIG_MISMATCH rank(s) [R…] …" naming, for each differing rank, its first differing key and
// both values. Collective over `world`.
#pragma once
#include "config/config.h"
#include "parallel/comm.h"

namespace megatrain {

void agree_on_config(const Config& cfg, const Comm& world);

}  // namespace megatrain
