#include "kernels/check.h"

namespace megatrain {

void check_failed(const char* file, int line, const char* expr, const std::string& msg) {
  throw Error(fmt::format("{}:{}: check `{}` failed: {}", file, line, expr, msg));
}

}  // namespace megatrain
