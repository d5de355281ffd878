#include "trainer/memory_hosts.h"

#include <fmt/format.h>

#include <filesystem>
#include <string>

#include "parallel/launch_env.h"
#include "trainer/checkpoint.h"

namespace megatrain {
namespace {

std::string default_memory_dir(const Config& cfg) {
  std::string name = std::filesystem::absolute(cfg.checkpoint.dir).lexically_normal().string();
  for (char& c : name)
    if (c == '/') c = '_';
  return "/dev/shm/megatrain/" + name;
}

}  // namespace

MemoryStore memory_store_for(const Config& cfg, const Comm& world) {
  const int per_node = ranks_per_node_from_env();
  const bool virtual_hosts = int_from_env("MEGATRAIN_RANKS_PER_NODE", 1, 0) > 0;
  const std::string node = virtual_hosts ? fmt::format("vnode{}", world.rank() / per_node) : host_name();
  return MemoryStore(cfg.checkpoint.memory_dir.empty() ? default_memory_dir(cfg) : cfg.checkpoint.memory_dir, node,
                     layout_json(cfg, world.size()));
}

int memory_buddy(int rank, int world) {
  const int per_node = ranks_per_node_from_env();
  return world <= per_node ? -1 : (rank + per_node) % world;
}

int memory_ward(int rank, int world) {
  const int per_node = ranks_per_node_from_env();
  return world <= per_node ? -1 : (rank - per_node % world + world) % world;
}

}  // namespace megatrain
