#include "optim/host_moments.h"

#include <vector>

#include "kernels/ops.h"

namespace megatrain {
namespace {

class HostFloatMoments final : public HostMoments {
 public:
  explicit HostFloatMoments(const AdamW& a) : a_(a) {}
  View view() override { return {a_.exp_avg(), a_.exp_avg_sq(), nullptr}; }
  void written() override {}

 private:
  const AdamW& a_;
};

class DeviceFloatMoments final : public HostMoments {
 public:
  DeviceFloatMoments(const AdamW& a, int64_t n, const Stream& s)
      : a_(a), n_(n), stream_(s), m_(static_cast<size_t>(n)), v_(static_cast<size_t>(n)) {}
  View view() override {
    copy_to_host(stream_, m_.data(), a_.moment1().part(0, Shape{n_}));
    copy_to_host(stream_, v_.data(), a_.moment2().part(0, Shape{n_}));
    return {m_.data(), v_.data(), nullptr};
  }
  void written() override {
    copy_from_host(stream_, a_.moment1().part(0, Shape{n_}), m_.data());
    copy_from_host(stream_, a_.moment2().part(0, Shape{n_}), v_.data());
  }

 private:
  const AdamW& a_;
  int64_t n_;
  Stream stream_;
  std::vector<float> m_, v_;
};

class WidenedMoments final : public HostMoments {
 public:
  WidenedMoments(const AdamW& a, int64_t n) : a_(a), n_(n) {}
  View view() override {
    auto wide = std::make_shared<std::vector<float>>(2 * static_cast<size_t>(n_));
    convert(Stream::cpu(), wide_part(*wide, 0), a_.moment1().part(0, Shape{n_}));
    convert(Stream::cpu(), wide_part(*wide, 1), a_.moment2().part(0, Shape{n_}));
    last_ = wide;
    return {wide->data(), wide->data() + n_, wide};
  }
  void written() override {
    const std::shared_ptr<std::vector<float>> wide = last_.lock();
    if (!wide) return;  // no view held: nothing was written
    convert(Stream::cpu(), a_.moment1().part(0, Shape{n_}), wide_part(*wide, 0));
    convert(Stream::cpu(), a_.moment2().part(0, Shape{n_}), wide_part(*wide, 1));
  }

 private:
  Tensor wide_part(std::vector<float>& wide, int k) const { return Tensor(wide.data() + k * n_, Shape{n_}); }

  const AdamW& a_;
  int64_t n_;
  std::weak_ptr<std::vector<float>> last_;
};

}  // namespace

std::unique_ptr<HostMoments> make_host_moments(const AdamW& adamw, int64_t n, const Stream& stream) {
  if (adamw.options().state_dtype == Precision::bf16) return std::make_unique<WidenedMoments>(adamw, n);
  if (stream.device == Device::cpu) return std::make_unique<HostFloatMoments>(adamw);
  return std::make_unique<DeviceFloatMoments>(adamw, n, stream);
}

}  // namespace megatrain
