// megatrain's exit codes: the contract between the trainer, its launchers and the resilient driver
// (docs/robustness.md C0; the 64–75 range follows BSD sysexits.h). README "When things go wrong" says
// what each means and what the driver does with it.
#pragma once

namespace megatrain {

inline constexpr int kExitStopped = 10;     // stopped early on request (signal, time or step limit) after a save
inline constexpr int kExitUsage = 64;       // bad config or command line: never restarted
inline constexpr int kExitData = 65;        // bad dataset, tokenizer, text or model file: never restarted
inline constexpr int kExitCheckpoint = 66;  // the checkpoint asked for cannot be loaded and none older is valid
inline constexpr int kExitSoftware = 70;    // an internal error or uncaught exception on some rank
inline constexpr int kExitHang = 75;        // a hang (watchdog), a lost peer or a failed collective
inline constexpr int kExitNonFinite = 76;   // train.max_consecutive_skips steps in a row with Inf/NaN gradients

}  // namespace megatrain
