// HDF5 helpers of checkpoint files (checkpoint_file.cpp): an owning handle, silencing HDF5's own
// error printing (megatrain reports its own), scalar and string attributes written little-endian,
// and a reader of root attributes whose every failure is an InputError naming the file.
#pragma once
#include <hdf5.h>

#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <utility>

#include "kernels/check.h"

namespace megatrain {

// Owns one HDF5 handle; closes it with the matching H5?close.
class H5 {
 public:
  H5(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  H5(H5&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  H5(const H5&) = delete;
  H5& operator=(const H5&) = delete;
  H5& operator=(H5&& o) noexcept {
    if (this != &o) {
      if (id_ >= 0) close_(id_);
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  ~H5() {
    if (id_ >= 0) close_(id_);
  }
  // Closes now and returns the close's result (the destructor cannot report it).
  herr_t close() { return close_(std::exchange(id_, -1)); }
  operator hid_t() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

void quiet_hdf5();

void write_attr_i64(hid_t obj, const char* name, int64_t v);
void write_attr_f64(hid_t obj, const char* name, double v);
void write_attr_u32(hid_t obj, const char* name, uint32_t v);
void write_attr_str(hid_t obj, const char* name, const std::string& v);

// Reads attributes of the checkpoint file at `path` (open as `file`); a missing or unreadable one
// is an InputError naming the file.
struct AttrReader {
  const std::string& path;
  hid_t file;

  [[noreturn]] void fail(const std::string& what) const;
  H5 attr(hid_t obj, const char* name, const std::string& where) const;
  template <class T>
  T scalar(hid_t obj, const char* name, hid_t native) const {
    H5 a = attr(obj, name, "root");
    T v{};
    if (H5Aread(a, native, &v) < 0) fail(fmt::format("attribute '{}' is unreadable", name));
    return v;
  }
  int64_t i64(hid_t obj, const char* name) const { return scalar<int64_t>(obj, name, H5T_NATIVE_INT64); }
  uint32_t u32(hid_t obj, const char* name) const { return scalar<uint32_t>(obj, name, H5T_NATIVE_UINT32); }
  double f64(hid_t obj, const char* name) const { return scalar<double>(obj, name, H5T_NATIVE_DOUBLE); }
  std::string str(hid_t obj, const char* name) const;
};

}  // namespace megatrain
