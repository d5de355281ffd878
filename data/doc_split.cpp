// Document split ranges (contract in doc_split.h). Invariant: the ranges partition [0, N) in order.
#include "data/doc_split.h"

#include <cmath>
#include <string>

#include "kernels/check.h"

namespace megatrain {

std::optional<std::array<double, 3>> parse_doc_split(std::string_view text) {
  std::array<double, 3> f{0.0, 0.0, 0.0};
  size_t count = 0;
  while (true) {
    const size_t comma = text.find(',');
    std::string_view part = text.substr(0, comma);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
    if (part.empty() || count == 3) return std::nullopt;
    double v = 0.0;
    const std::string s(part);
    size_t used = 0;
    try {
      v = std::stod(s, &used);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (used != s.size() || !std::isfinite(v) || v < 0.0) return std::nullopt;
    f[count++] = v;
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  const double sum = f[0] + f[1] + f[2];
  if (!(sum > 0.0)) return std::nullopt;
  for (double& x : f) x /= sum;
  return f;
}

std::array<DocRange, 3> split_documents(const std::array<double, 3>& fractions, int64_t num_documents) {
  MT_CHECK(num_documents >= 0, "negative document count {}", num_documents);
  std::array<int64_t, 4> b{0, 0, 0, 0};
  for (size_t i = 0; i < 3; ++i)
    b[i + 1] = b[i] + static_cast<int64_t>(std::nearbyint(fractions[i] * static_cast<double>(num_documents)));
  const int64_t diff = b[3] - num_documents;
  for (size_t i = 1; i < 4; ++i) b[i] -= diff;
  for (size_t i = 0; i < 3; ++i)
    MT_CHECK(b[i] <= b[i + 1], "split boundaries {} {} {} {} are not ordered", b[0], b[1], b[2], b[3]);
  return {DocRange{b[0], b[1]}, DocRange{b[1], b[2]}, DocRange{b[2], b[3]}};
}

}  // namespace megatrain
