// Local rank and size from launcher environment variables (see launch_env.h for the order).
// Invariant: every value read is a whole decimal number in range, or an InputError names it.
#include "parallel/launch_env.h"

#include <charconv>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/check.h"

namespace megatrain {
namespace {

// The integer value of the whole of `text`, which must be >= `min`.
int parse_int(const char* var, std::string_view text, int min) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  MT_INPUT_CHECK(ec == std::errc() && end == text.data() + text.size() && value >= min,
                 "environment variable {}='{}': expected an integer >= {}", var, text, min);
  return value;
}

const char* get(const char* var) {
  const char* v = std::getenv(var);
  return v && *v ? v : nullptr;
}

// SLURM_TASKS_PER_NODE: comma-separated entries "N" or "N(xM)" (N tasks on each of M nodes).
int slurm_tasks_per_node(const char* value) {
  const char* var = "SLURM_TASKS_PER_NODE";
  std::vector<int> per_node;
  std::string_view rest(value);
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view entry = rest.substr(0, comma);
    int repeat = 1;
    if (const size_t open = entry.find("(x"); open != std::string_view::npos) {
      MT_INPUT_CHECK(entry.back() == ')', "environment variable {}='{}': malformed entry '{}'", var, value, entry);
      repeat = parse_int(var, entry.substr(open + 2, entry.size() - open - 3), 1);
      entry = entry.substr(0, open);
    }
    const int n = parse_int(var, entry, 1);
    per_node.insert(per_node.end(), static_cast<size_t>(repeat), n);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  bool uniform = true;
  for (int n : per_node) uniform = uniform && n == per_node.front();
  if (uniform) return per_node.front();
  const char* node = get("SLURM_NODEID");
  MT_INPUT_CHECK(node, "environment variable {}='{}' differs between nodes and SLURM_NODEID is not set", var, value);
  const int id = parse_int("SLURM_NODEID", node, 0);
  MT_INPUT_CHECK(id < static_cast<int>(per_node.size()), "SLURM_NODEID={} is beyond the {} nodes of {}='{}'", id,
                 per_node.size(), var, value);
  return per_node[static_cast<size_t>(id)];
}

}  // namespace

int local_rank_from_env() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"})
    if (const char* v = get(var)) return parse_int(var, v, 0);
  return 0;
}

int local_size_from_env() {
  if (const char* v = get("OMPI_COMM_WORLD_LOCAL_SIZE")) return parse_int("OMPI_COMM_WORLD_LOCAL_SIZE", v, 1);
  if (const char* v = get("SLURM_NTASKS_PER_NODE")) return parse_int("SLURM_NTASKS_PER_NODE", v, 1);
  if (const char* v = get("SLURM_TASKS_PER_NODE")) return slurm_tasks_per_node(v);
  if (const char* v = get("MPI_LOCALNRANKS")) return parse_int("MPI_LOCALNRANKS", v, 1);
  return 1;
}

int int_from_env(const char* var, int min, int fallback) {
  const char* v = get(var);
  return v ? parse_int(var, v, min) : fallback;
}

int ranks_per_node_from_env() {
  if (const char* v = get("MEGATRAIN_RANKS_PER_NODE")) return parse_int("MEGATRAIN_RANKS_PER_NODE", v, 1);
  return local_size_from_env();
}

}  // namespace megatrain
