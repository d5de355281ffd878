// Checking a checkpoint folder (DIR/step_NNNNNNN) against its manifest.json (checkpoint/manifest.h):
// the manifest's schema, model.h5's byte size and whole-file CRC-32, and — in a full verify — every
// tensor's bytes against its crc32 attribute and the manifest's. Every refusal is a CheckpointError
// worded CKPT_INVALID step=S file=FILE reason=… (checkpoint/checkpoint_dir.h).
#pragma once
#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <optional>

#include "checkpoint/manifest.h"

namespace megatrain {

enum class ManifestRule { required, optional };

// Collective over `comm` (MPI_COMM_NULL: this process alone). Rank 0 reads and checks
// FOLDER/manifest.json and shares it; every rank then reads a slice of model.h5 for its CRC-32, and
// the combined CRC and the file's size are compared with the manifest's. Returns the manifest, or
// nullopt when the folder has none and `rule` is optional. Throws the same CheckpointError on every
// rank.
std::optional<Manifest> checkpoint_folder_check(const std::filesystem::path& folder, MPI_Comm comm, ManifestRule rule);

// Collective over `comm`: the CRC-32 of the file's first `bytes` bytes, each rank reading a slice.
// A failed read is the same CheckpointIoError on every rank.
uint32_t file_crc32_shared(const std::filesystem::path& path, int64_t bytes, MPI_Comm comm);

struct FolderVerified {
  Manifest manifest;
  int64_t bytes = 0;     // model.h5's size
  double seconds = 0.0;  // reading it whole, twice: the file's CRC, then each tensor's
};

// In this process alone: checkpoint_folder_check, the root attributes' checksum (meta_crc32), then
// every dataset of model.h5 read and its CRC-32 compared with its crc32 attribute and with the
// manifest's list.
FolderVerified checkpoint_folder_verify(const std::filesystem::path& folder);

}  // namespace megatrain
