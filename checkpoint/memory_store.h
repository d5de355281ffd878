// The per-host store of memory snapshots (checkpoint/memory_snapshot.h; docs/robustness.md R26):
//   ROOT/<node>/<layout>/step_NNNNNNN/rank_R.snap   (R: the rank whose state it is)
//   ROOT/<node>/<layout>/step_NNNNNNN/COMMITTED     (every rank of the job wrote its snapshot and its
//                                                    buddy's copy of it, trainer/memory_snapshots.h)
//   ROOT/<node>/<layout>/LAYOUT                     (the layout's JSON, trainer/checkpoint.h layout_json)
//   ROOT/<node>/<layout>/spare/rank_R.snap          (a pruned snapshot's file, rewritten in place by the
//                                                    next put of rank R: no fresh memory to allocate)
// ROOT is in memory (/dev/shm by default) and outlives the job — an MPI job dies whole when one rank
// dies; the host's memory does not. <layout> keys the folder by the layout the snapshots were taken
// at: a snapshot restores as it is into the same layout, and re-sharded into one that differs only
// in dp (a host lost, trainer/memory_recovery.h). Writes are atomic (.tmp, then rename).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/mapped_file.h"

namespace megatrain {

struct StoredStep {
  int64_t step = 0;
  std::vector<int> ranks;  // whose snapshots this host holds, ascending
  friend bool operator==(const StoredStep&, const StoredStep&) = default;
};

class MemoryStore {
 public:
  MemoryStore(std::filesystem::path root, const std::string& node, const std::string& layout_json);
  // This host's folders of every layout (this one's when it exists), each with its LAYOUT's JSON.
  std::vector<MemoryStore> host_layouts() const;
  const std::string& layout_json() const { return layout_json_; }

  // Rank's snapshot of `step`, `size` bytes, written in place: the rank's spare file when there is
  // one (tmpfs then allocates and frees no pages: a 712 MiB file rewritten in 0.33 s here, written
  // fresh and removed in 0.7–1.0 s), else a new one, mapped for writing (checkpoint/mapped_file.h);
  // finish() puts it in the store. Throws CheckpointError when it cannot.
  class Writing {
   public:
    char* data() const { return file_.data(); }
    size_t size() const { return file_.size(); }
    void finish();  // unmaps the file and renames it from .tmp to rank_R.snap
   private:
    friend class MemoryStore;
    Writing(MappedFile file, std::filesystem::path tmp, std::filesystem::path path)
        : file_(std::move(file)), tmp_(std::move(tmp)), path_(std::move(path)) {}
    MappedFile file_;
    std::filesystem::path tmp_, path_;
  };
  Writing write(int64_t step, int rank, size_t size) const;
  // write() of `bytes`, finished.
  void put(int64_t step, int rank, std::string_view bytes) const;
  void commit(int64_t step) const;
  // Removes all but the newest `keep` committed steps (their files become the ranks' spares), every
  // uncommitted step older than the newest committed one (a set a failure left half-written), and,
  // once this layout has a committed step, the host's folders of other layouts (older sets a
  // relaunch at this layout re-sharded).
  void prune(int keep) const;
  void clear() const;  // every step of this host, of every layout; ROOT too when no other host's is left
  // What clear() does, from outside a job (`megatrain checkpoint forget-memory`): removes ROOT/<node>
  // and then ROOT when empty; the bytes freed, 0 when there was no such folder. Throws CheckpointError,
  // removing nothing, when ROOT/<node> holds anything but layout folders with their LAYOUT.
  static int64_t forget(const std::filesystem::path& root, const std::string& node);
  std::vector<StoredStep> committed() const;  // newest first
  std::string get(int64_t step, int rank) const;  // throws CheckpointError when missing or unreadable
  int64_t bytes() const;  // held under this host's folder for this layout, spares included
  const std::filesystem::path& dir() const { return dir_; }

 private:
  MemoryStore(std::filesystem::path dir, std::string layout_json);
  std::filesystem::path step_dir(int64_t step) const;
  std::filesystem::path spare(int rank) const;
  std::filesystem::path dir_;
  std::string layout_json_;
};

// "12:0,1;11:0,1" and back: a host's committed steps as one line, for gathering over the ranks.
std::string stored_steps_text(const std::vector<StoredStep>& steps);
std::vector<StoredStep> parse_stored_steps(const std::string& text);

}  // namespace megatrain
