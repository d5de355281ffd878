// The presets in configs/ (the sizes people train): each parses, plans on the cluster its comment
// states, and the layout its comment recommends is the planner's best there. Planning must not
// allocate the model (planner/plan_memory.h), so even GPT-3 175B plans in moments.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>

#include "config/config.h"
#include "planner/plan_search.h"

namespace megatrain {
namespace {

struct Stated {
  int gpus = 0;
  std::string gpu, network, layout;
};

// From the preset's comment: "# Planner (megatrain plan --config F --gpus N --gpu G [--network S]):"
// and, on the next line, "#   LAYOUT — …".
Stated stated_plan(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  Stated s;
  const std::regex command(R"(--gpus (\d+) --gpu (\w+)(?: --network (\S+?))?\):)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, command)) continue;
    s.gpus = std::stoi(m[1]), s.gpu = m[2], s.network = m[3];
    std::getline(in, line);
    const size_t dash = line.find(" — ");
    s.layout = line.substr(4, dash == std::string::npos ? std::string::npos : dash - 4);
    break;
  }
  return s;
}

TEST(Presets, EachParsesPlansAndStatesThePlannersLayout) {
  for (const char* name : {"gpt2_124m", "gpt2_350m", "gpt2_774m", "gpt2_1558m", "llama_1b3", "llama3_8b", "llama3_70b",
                           "mixtral_8x7b", "gpt3_175b"}) {
    const std::string path = std::string(MEGATRAIN_SOURCE_DIR) + "/configs/" + name + ".toml";
    const Config c = load_config(path, {});
    const Stated s = stated_plan(path);
    ASSERT_GT(s.gpus, 0) << path << ": no '# Planner (megatrain plan … --gpus N --gpu G):' line";
    DeviceProfile d = gpu_profile(s.gpu);
    if (!s.network.empty()) apply_network(d, s.network);
    const auto t0 = std::chrono::steady_clock::now();
    const PlanSearch plan = search_layouts(c, s.gpus, d);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_FALSE(plan.ranked.empty()) << name;
    EXPECT_EQ(layout_name(plan.ranked[0].config), s.layout) << name << ": the comment's layout is not the planner's";
    EXPECT_LT(seconds, 30.0) << name;
    // The best fits the device and is faster than or as fast as every other fitting layout.
    EXPECT_LE(static_cast<double>(plan.ranked[0].memory.total()), d.memory_gib * double(1 << 30)) << name;
    for (const Plan& p : plan.ranked) EXPECT_GE(p.cost.step, plan.ranked[0].cost.step) << name;
  }
}

}  // namespace
}  // namespace megatrain
