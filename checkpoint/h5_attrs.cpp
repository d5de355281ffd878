#include "checkpoint/h5_attrs.h"

#include <fmt/format.h>

#include <algorithm>

namespace megatrain {

void quiet_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

void write_attr_i64(hid_t obj, const char* name, int64_t v) {
  H5 space(H5Screate(H5S_SCALAR), H5Sclose);
  H5 a(H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  MT_CHECK(a.ok() && H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0, "HDF5: cannot write attribute {}", name);
}

void write_attr_f64(hid_t obj, const char* name, double v) {
  H5 space(H5Screate(H5S_SCALAR), H5Sclose);
  H5 a(H5Acreate2(obj, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  MT_CHECK(a.ok() && H5Awrite(a, H5T_NATIVE_DOUBLE, &v) >= 0, "HDF5: cannot write attribute {}", name);
}

void write_attr_u32(hid_t obj, const char* name, uint32_t v) {
  H5 space(H5Screate(H5S_SCALAR), H5Sclose);
  H5 a(H5Acreate2(obj, name, H5T_STD_U32LE, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  MT_CHECK(a.ok() && H5Awrite(a, H5T_NATIVE_UINT32, &v) >= 0, "HDF5: cannot write attribute {}", name);
}

void write_attr_str(hid_t obj, const char* name, const std::string& v) {
  H5 type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type, std::max<size_t>(1, v.size()));
  H5 space(H5Screate(H5S_SCALAR), H5Sclose);
  H5 a(H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  std::string padded = v.empty() ? std::string(1, '\0') : v;
  MT_CHECK(a.ok() && H5Awrite(a, type, padded.data()) >= 0, "HDF5: cannot write attribute {}", name);
}

void AttrReader::fail(const std::string& what) const {
  throw CheckpointError(fmt::format("checkpoint {}: {}", path, what));
}

H5 AttrReader::attr(hid_t obj, const char* name, const std::string& where) const {
  if (H5Aexists(obj, name) <= 0) fail(fmt::format("{} has no attribute '{}' (not a megatrain checkpoint?)", where, name));
  return H5(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
}

std::string AttrReader::str(hid_t obj, const char* name) const {
  H5 a = attr(obj, name, "root");
  H5 type(H5Aget_type(a), H5Tclose);
  if (H5Tget_class(type) != H5T_STRING) fail(fmt::format("attribute '{}' is not a string", name));
  std::string v(H5Tget_size(type), '\0');
  if (H5Aread(a, type, v.data()) < 0) fail(fmt::format("attribute '{}' is unreadable", name));
  while (!v.empty() && v.back() == '\0') v.pop_back();
  return v;
}

}  // namespace megatrain
