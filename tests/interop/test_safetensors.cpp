// Tests of trainer/safetensors and trainer/half: bit-exact write → read round trips, the writer's
// output checked by an independent minimal reader and against hand-built bytes, every malformed
// file rejected with an InputError naming the file, and 16-bit float conversions against known bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/expect_contains.h"
#include "kernels/check.h"
#include "interop/safetensors.h"
#include "tests/input_error.h"
#include "tests/temp_dir.h"

namespace megatrain {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A reader written from the format description alone, sharing no code with trainer/safetensors:
// returns name → raw bytes, after checking the layout the writer promises.
std::map<std::string, std::string> independent_read(const std::string& path, nlohmann::json* header_out = nullptr) {
  const std::map<std::string, size_t> sizes = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
                                               {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1}};
  std::string file = slurp(path);
  EXPECT_GE(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[i]);
  EXPECT_LE(8 + n, file.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "data section must start at a multiple of 8";
  std::string text = file.substr(8, n);
  EXPECT_EQ(text.find_last_not_of(' ') + 1, text.rfind('}') + 1) << "only spaces may pad the header";
  nlohmann::json header = nlohmann::json::parse(text);
  EXPECT_TRUE(header.is_object());
  std::string data = file.substr(8 + n);
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  std::map<std::string, std::string> out;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") continue;
    EXPECT_EQ(sizes.count(e["dtype"].get<std::string>()), 1u) << name;
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) numel *= d.get<uint64_t>();
    uint64_t b = e["data_offsets"][0], en = e["data_offsets"][1];
    EXPECT_EQ(en - b, numel * sizes.at(e["dtype"].get<std::string>())) << name;
    spans.emplace_back(b, en);
    out[name] = data.substr(b, en - b);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t pos = 0;
  for (auto [b, en] : spans) {
    EXPECT_EQ(b, pos) << "tensors must tile the data section";
    pos = en;
  }
  EXPECT_EQ(pos, data.size());
  if (header_out) *header_out = header;
  return out;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write_raw(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }
  // A file with this header text (no padding) followed by data_size zero bytes.
  std::string write_file(const std::string& name, const std::string& header, size_t data_size) const {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    return write_raw(name, bytes + header + std::string(data_size, '\0'));
  }
  // The message of the InputError that opening (and then `use`) throws; fails when none is thrown.
  static std::string open_error(const std::string& p,
                                const std::function<void(const SafetensorsFile&)>& use = nullptr) {
    return test::input_error_of([&] {
      SafetensorsFile f = SafetensorsFile::open(p);
      if (use) use(f);
    });
  }
  test::TempDir dir_{"safetensors"};
};

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + 37 * i + (i >> 3));
  return v;
}

TEST_F(SafetensorsTest, RoundTripIsBitExactForEveryDtypeAndShape) {
  struct Case {
    std::string name, dtype;
    std::vector<int64_t> shape;
    size_t esize;
  };
  const std::vector<Case> cases = {
      {"w.f32", "F32", {2, 3}, 4}, {"w.bf16", "BF16", {4}, 2},   {"w.f16", "F16", {3, 1}, 2},
      {"f64", "F64", {2}, 8},      {"i64", "I64", {1, 2, 1}, 8}, {"i32", "I32", {5}, 4},
      {"i16", "I16", {1, 2}, 2},   {"i8", "I8", {3}, 1},         {"empty", "U8", {0}, 1},
      {"flags", "BOOL", {2}, 1},   {"scalar", "F32", {}, 4},     {"empty3d", "F16", {3, 0, 2}, 2},
      {"u8", "U8", {7}, 1}};  // 7 bytes: later tensors start unaligned
  std::vector<std::vector<uint8_t>> data;
  std::vector<SafeTensorRef> refs;
  for (size_t i = 0; i < cases.size(); ++i) {
    int64_t numel = 1;
    for (int64_t d : cases[i].shape) numel *= d;
    data.push_back(pattern(static_cast<size_t>(numel) * cases[i].esize, static_cast<uint8_t>(i)));
    refs.push_back({cases[i].name, cases[i].dtype, cases[i].shape, data.back().data(), data.back().size()});
  }
  refs.push_back({"after.unaligned", "F64", {3}, nullptr, 24});
  std::vector<uint8_t> last = pattern(24, 99);
  refs.back().data = last.data();
  data.push_back(last);
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "1200"}, {"unicode", "λ→∞"}};
  const std::string p = path("model.safetensors");
  safetensors_write(p, refs, meta);
  EXPECT_FALSE(fs::exists(p + ".tmp"));

  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.metadata(), meta);
  std::vector<std::string> want_names;
  for (const auto& r : refs) want_names.push_back(r.name);
  EXPECT_EQ(f.names(), want_names) << "names come back in the order written";
  std::map<std::string, std::string> independent = independent_read(p);
  ASSERT_EQ(independent.size(), refs.size());
  for (size_t i = 0; i < refs.size(); ++i) {
    SCOPED_TRACE(refs[i].name);
    const TensorInfo& info = f.info(refs[i].name);
    EXPECT_EQ(info.dtype, refs[i].dtype);
    EXPECT_EQ(info.shape, refs[i].shape);
    std::span<const uint8_t> got = f.bytes(refs[i].name);
    EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.end()), data[i]);
    EXPECT_EQ(independent.at(refs[i].name), std::string(data[i].begin(), data[i].end()));
    SafeTensor owned = f.load(refs[i].name);
    EXPECT_EQ(owned.data, data[i]);
    EXPECT_EQ(owned.shape, refs[i].shape);
  }
  EXPECT_EQ(f.info("scalar").numel(), 1);
  EXPECT_EQ(f.info("empty3d").numel(), 0);
}

TEST_F(SafetensorsTest, ExactBytesOfATinyFile) {
  const float a[2] = {1.0f, -2.0f};
  const uint8_t bias = 7;
  const std::string p = path("tiny.safetensors");
  safetensors_write(p, {{"a", "F32", {2}, a, sizeof(a)}, {"bias", "U8", {}, &bias, 1}}, {{"format", "pt"}});
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("bias":{"dtype":"U8","shape":[],"data_offsets":[8,9]}})";
  ASSERT_EQ(header.size(), 139u);  // padded with 5 spaces to 144 = 0x90
  std::string want("\x90\0\0\0\0\0\0\0", 8);
  want += header + "     ";
  want += std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x07", 9);
  EXPECT_EQ(slurp(p), want);
}

TEST_F(SafetensorsTest, NoTensorsAndOverwrite) {
  const std::string p = path("empty.safetensors");
  safetensors_write(p, {}, {});
  EXPECT_EQ(slurp(p), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  EXPECT_TRUE(SafetensorsFile::open(p).names().empty());
  const int32_t v = 42;
  safetensors_write(p, {{"v", "I32", {1}, &v, 4}}, {});  // replaces the old file whole
  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.names(), std::vector<std::string>{"v"});
  EXPECT_TRUE(f.metadata().empty());
  nlohmann::json header;
  independent_read(p, &header);
  EXPECT_FALSE(header.contains("__metadata__")) << "empty metadata is left out";
}

TEST_F(SafetensorsTest, ReadF32ConvertsHalfFormats) {
  const std::vector<float> values = {1.0f, -2.5f, 0.0f, 65504.0f, -0.375f};
  std::vector<uint16_t> bf16, fp16;
  for (float v : values) bf16.push_back(float_to_bf16(v)), fp16.push_back(float_to_fp16(v));
  const std::string p = path("mixed.safetensors");
  const int32_t ints[2] = {1, 2};
  safetensors_write(p, {{"f32", "F32", {5}, values.data(), 20}, {"bf16", "BF16", {5}, bf16.data(), 10},
                        {"f16", "F16", {5}, fp16.data(), 10}, {"ints", "I32", {2}, ints, 8}});
  SafetensorsFile f = SafetensorsFile::open(p);
  std::vector<float> out(5);
  f.read_f32("f32", out);
  EXPECT_EQ(out, values);
  f.read_f32("f16", out);
  EXPECT_EQ(out, values);  // all exactly representable in fp16
  f.read_f32("bf16", out);
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.5f, 0.0f, 65536.0f, -0.375f}));  // 65504 rounds up in bf16
  std::string msg = open_error(p, [](const SafetensorsFile& g) {
    std::vector<float> o(2);
    g.read_f32("ints", o);
  });
  EXPECT_CONTAINS(msg, p);
  EXPECT_CONTAINS(msg, "'ints'");
  msg = open_error(p, [](const SafetensorsFile& g) {
    std::vector<float> o(4);
    g.read_f32("f32", o);
  });
  EXPECT_CONTAINS(msg, "5 elements");
}

TEST_F(SafetensorsTest, WriterRejectsBadArguments) {
  const float x[2] = {1, 2};
  const std::string p = path("bad.safetensors");
  EXPECT_THROW(safetensors_write(p, {{"x", "F32", {3}, x, 8}}), Error);  // size ≠ shape
  EXPECT_THROW(safetensors_write(p, {{"x", "Q4", {2}, x, 8}}), Error);
  EXPECT_THROW(safetensors_write(p, {{"x", "F32", {2}, x, 8}, {"x", "F32", {2}, x, 8}}), Error);
  EXPECT_THROW(safetensors_write(p, {{"__metadata__", "F32", {2}, x, 8}}), Error);
  EXPECT_FALSE(fs::exists(p));
  EXPECT_THROW(safetensors_write(path("no/such/dir/x.safetensors"), {}), InputError);
}

TEST_F(SafetensorsTest, EveryMalformedFileIsAnInputErrorNamingTheFile) {
  const std::string t8 = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  struct Case {
    std::string what, header;
    size_t data_size;
    std::vector<std::string> parts;  // substrings the message must hold, besides the path
  };
  const std::vector<Case> cases = {
      {"not JSON", "{\"t\":", 0, {"not valid JSON"}},
      {"not an object", "[1,2]", 0, {"not an object"}},
      {"unknown dtype", R"({"t":{"dtype":"X9","shape":[1],"data_offsets":[0,1]}})", 1, {"'t'", "unknown dtype 'X9'"}},
      {"size mismatch", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, {"'t'", "needs 12 bytes"}},
      {"out of range", "{" + t8 + "}", 4, {"'t'", "out of range"}},
      {"begin after end", R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4, {"'t'", "end before"}},
      {"negative dim", R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0, {"'t'", "non-negative"}},
      {"bad offsets", R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, {"'t'", "data_offsets"}},
      {"overlap", "{" + t8 + R"(,"u":{"dtype":"I32","shape":[1],"data_offsets":[4,8]}})", 8, {"'u'", "overlap", "'t'"}},
      {"gap", "{" + t8 + R"(,"u":{"dtype":"I32","shape":[1],"data_offsets":[12,16]}})", 16, {"'u'", "gap", "[8, 12)"}},
      {"gap at start", R"({"t":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4, {"'t'", "gap", "start"}},
      {"not covered", "{" + t8 + "}", 12, {"12 bytes", "only the first 8"}},
      {"no tensors but data", "{}", 4, {"only the first 0"}},
      {"duplicate", "{" + t8 + "," + t8 + "}", 8, {"'t'", "more than once"}},
      {"metadata not strings", R"({"__metadata__":{"step":3}})", 0, {"__metadata__", "'step'"}},
      {"entry not object", R"({"t":[1]})", 0, {"'t'", "not an object"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].what);
    const std::string p = write_file("bad" + std::to_string(i) + ".safetensors", cases[i].header, cases[i].data_size);
    std::string msg = open_error(p);
    EXPECT_CONTAINS(msg, p);
    for (const std::string& part : cases[i].parts) EXPECT_CONTAINS(msg, part);
  }
  std::string p = write_raw("short.safetensors", std::string("\x02\0\0\0", 4));
  EXPECT_CONTAINS(open_error(p), p);
  EXPECT_CONTAINS(open_error(p), "shorter than");
  p = write_raw("long_header.safetensors", std::string("\xff\0\0\0\0\0\0\0{}", 10));
  EXPECT_CONTAINS(open_error(p), "beyond the end");
  EXPECT_CONTAINS(open_error(p), p);
  p = path("missing.safetensors");
  EXPECT_CONTAINS(open_error(p), p);
}

TEST_F(SafetensorsTest, MissingTensorListsCloseNames) {
  const float x[1] = {0};
  std::vector<SafeTensorRef> refs;
  for (const char* n : {"blocks.0.attn.qkv.weight", "blocks.0.mlp.fc.weight", "blocks.1.attn.qkv.weight", "wte"})
    refs.push_back({n, "F32", {1}, x, 4});
  const std::string p = path("names.safetensors");
  safetensors_write(p, refs);
  std::string msg = open_error(p, [](const SafetensorsFile& f) { (void)f.info("blocks.0.attn.qkv.weigth"); });
  EXPECT_CONTAINS(msg, p);
  EXPECT_CONTAINS(msg, "'blocks.0.attn.qkv.weigth'");
  EXPECT_CONTAINS(msg, "closest names: 'blocks.0.attn.qkv.weight', 'blocks.1.attn.qkv.weight'");
  EXPECT_THROW((void)SafetensorsFile::open(p).bytes("nope"), InputError);
}

// ---- 16-bit float conversions ----

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

TEST(HalfTest, Bf16KnownBitPatterns) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.5f), 0xc020);
  EXPECT_EQ(float_to_bf16(65504.0f), 0x4780);  // 0x477fe000 rounds up to 65536
  EXPECT_EQ(float_to_bf16(1e-8f), 0x322c);     // 0x322bcc77
  EXPECT_EQ(float_to_bf16(0.1f), 0x3dcd);      // 0x3dcccccd
  EXPECT_EQ(float_to_bf16(from_bits(0x00010000)), 0x0001);  // float subnormal
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000)), 0x3f80);  // tie → even (down)
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000)), 0x3f82);  // tie → even (up)
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(float_to_bf16(from_bits(0x7f800001)), 0x7fc0);              // NaN payload in low bits stays NaN
  EXPECT_EQ(float_to_bf16(from_bits(0xffc00000)), 0xffc0);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc020), -2.5f);
  EXPECT_EQ(bits(bf16_to_float(0x7f80)), 0x7f800000u);
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7fc1)));
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every non-NaN bf16 survives the round trip
    if ((h & 0x7fff) > 0x7f80) continue;
    ASSERT_EQ(float_to_bf16(bf16_to_float(static_cast<uint16_t>(h))), h);
  }
}

TEST(HalfTest, Fp16KnownBitPatterns) {
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(-2.5f), 0xc100);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);   // below the tie with 65536
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);   // tie → even → inf
  EXPECT_EQ(float_to_fp16(0.1f), 0x2e66);
  EXPECT_EQ(float_to_fp16(1e-8f), 0x0000);      // under half the smallest subnormal
  EXPECT_EQ(float_to_fp16(-1e-8f), 0x8000);
  EXPECT_EQ(float_to_fp16(1e-6f), 0x0011);      // subnormal: round(16.78) = 17 units of 2^-24
  EXPECT_EQ(float_to_fp16(6.0e-5f), 0x03ef);    // largest-exponent subnormal range
  EXPECT_EQ(float_to_fp16(0x1p-24f), 0x0001);
  EXPECT_EQ(float_to_fp16(0x1p-25f), 0x0000);        // tie → even (zero)
  EXPECT_EQ(float_to_fp16(3 * 0x1p-25f), 0x0002);    // tie → even (up)
  EXPECT_EQ(float_to_fp16(0x1p-14f), 0x0400);        // smallest normal
  EXPECT_EQ(float_to_fp16(0x1p-14f - 0x1p-25f), 0x0400);  // rounds up out of the subnormals
  EXPECT_EQ(float_to_fp16(1.0f + 0x1p-11f), 0x3c00);      // tie → even (down)
  EXPECT_EQ(float_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie → even (up)
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(float_to_fp16(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_EQ(float_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(float_to_fp16(std::numeric_limits<float>::quiet_NaN()), 0x7e00);
  EXPECT_EQ(float_to_fp16(from_bits(0x7f800001)) & 0x7e00, 0x7e00);  // signalling NaN stays NaN
  EXPECT_EQ(fp16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xc100), -2.5f);
  EXPECT_EQ(fp16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_float(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(bits(fp16_to_float(0x8000)), 0x80000000u);
  EXPECT_EQ(fp16_to_float(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7e00)));
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every non-NaN fp16 survives the round trip
    if ((h & 0x7fff) > 0x7c00) continue;
    ASSERT_EQ(float_to_fp16(fp16_to_float(static_cast<uint16_t>(h))), h);
  }
}

}  // namespace
}  // namespace megatrain
