// The safetensors reader and writer (train/serialization/safetensors.h): what the writer makes
// reads back byte for byte, aligned; every crafted or damaged file (short, truncated, a header
// claiming too much, bad JSON, unknown dtype, shapes and offsets that disagree, overlaps,
// gaps, duplicate names) is an error naming the file and, where there is one, the tensor;
// random damage never does anything else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "seqmix/train/serialization/safetensors.h"
#include "support/errors.h"
#include "support/temp_dir.h"

using namespace seqmix;
using seqmix::testing::error_of;

namespace {

// A file of `header` (unpadded JSON) and `buffer`, with the header's true length unless
// `claimed` is given.
std::string file_of(const std::string& header, const std::string& buffer,
                    uint64_t claimed = UINT64_MAX) {
  const uint64_t n = claimed == UINT64_MAX ? header.size() : claimed;
  std::string s;
  for (int k = 0; k < 8; ++k) s.push_back(static_cast<char>((n >> (8 * k)) & 0xff));
  return s + header + buffer;
}

std::string parse_error(const std::string& bytes) {
  return error_of([&] { train::parse_safetensors(bytes, "m.safetensors"); });
}

// One F32 tensor "w" of shape [2] at [0, 8) in an 8-byte buffer, with `entry` replacing its
// description.
std::string one(const std::string& entry, const std::string& buffer = std::string(8, '\0')) {
  return file_of("{\"w\":" + entry + "}", buffer);
}

#define EXPECT_ERROR(bytes, text)                                                       \
  do {                                                                                  \
    const std::string msg_ = parse_error(bytes);                                        \
    EXPECT_NE(msg_.find(text), std::string::npos) << msg_;                              \
    EXPECT_NE(msg_.find("safetensors file 'm.safetensors'"), std::string::npos) << msg_; \
  } while (0)

}  // namespace

TEST(Safetensors, WriterAndReaderAgreeAndAlignEveryTensor) {
  const std::vector<float> w = {1.5f, -2.0f, 3.25f};
  const int64_t steps = 7;
  const std::vector<uint8_t> flags = {1, 0};
  const std::vector<double> d = {0.1, 1e300};
  std::vector<train::SafetensorsTensor> tensors = {
      {"blocks.0.w", "F32", {3}, w.data(), 12},
      {"bn.num_batches_tracked", "I64", {}, &steps, 8},
      {"mask", "BOOL", {2, 1}, flags.data(), 2},
      {"empty", "F32", {0, 4}, nullptr, 0},
      {"d", "F64", {2}, d.data(), 16}};
  const std::string bytes = train::safetensors_bytes(tensors, {{"format", "pt"}});
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  const auto file = train::parse_safetensors(bytes, "x");
  EXPECT_EQ(file.metadata.at("format"), "pt");
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (const auto& e : file.tensors) {
    EXPECT_EQ(e.begin % static_cast<uint64_t>(train::safetensors_dtype_size(e.dtype)), 0u)
        << e.name;
    const auto it = std::find_if(tensors.begin(), tensors.end(),
                                 [&](const auto& t) { return t.name == e.name; });
    ASSERT_NE(it, tensors.end()) << e.name;
    EXPECT_EQ(e.dtype, it->dtype);
    EXPECT_EQ(e.shape, it->shape);
    ASSERT_EQ(e.end - e.begin, it->nbytes);
    if (it->nbytes) {
      EXPECT_EQ(std::memcmp(file.data(e), it->data, it->nbytes), 0) << e.name;
    }
  }
  // 8-byte tensors first, then by size, each in the order given.
  EXPECT_EQ(file.tensors.front().name, "bn.num_batches_tracked");
  EXPECT_EQ(file.tensors[1].name, "d");

  EXPECT_NE(error_of([&] { train::safetensors_bytes({{"w", "F32", {3}, w.data(), 8}}, {}); })
                .find("tensor 'w' has shape [3] and dtype F32 but 8 bytes"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              train::safetensors_bytes(
                  {{"w", "F32", {3}, w.data(), 12}, {"w", "F32", {3}, w.data(), 12}}, {});
            }).find("tensor 'w' is given twice"),
            std::string::npos);
  EXPECT_NE(error_of([&] { train::safetensors_bytes({{"w", "F31", {3}, w.data(), 12}}, {}); })
                .find("has dtype 'F31'"),
            std::string::npos);
  // An empty file of tensors is a file.
  EXPECT_TRUE(train::parse_safetensors(train::safetensors_bytes({}, {}), "x").tensors.empty());
}

TEST(Safetensors, CraftedHeadersAreErrorsNamingFileAndTensor) {
  const std::string good = R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  EXPECT_TRUE(parse_error(one(good)) == "(no error)") << parse_error(one(good));

  EXPECT_ERROR(std::string("\x02\0\0", 3), "it holds 3 bytes, fewer than the 8");
  EXPECT_ERROR(file_of("{}", "", 1ull << 62), "more than the 100000000 a safetensors header");
  EXPECT_ERROR(file_of("{}", "", 3000), "its header claims 3000 bytes, the file holds 2 after");
  EXPECT_ERROR(file_of("{\"w\": {", ""), "its header is not valid JSON (parse error");
  EXPECT_ERROR(file_of("[1, 2]", ""), "its header is JSON but not an object");
  EXPECT_ERROR(file_of("{\"w\xff\": 1}", ""), "not valid JSON");
  EXPECT_ERROR(file_of("{\"w\":" + good + ",\"w\":" + good + "}", std::string(8, '\0')),
               "holds the name 'w' twice");
  EXPECT_ERROR(one(R"({"dtype":"F32","shape":[[2]],"data_offsets":[0,8]})"), "nests");
  EXPECT_ERROR(one(R"({"dtype":"F33","shape":[2],"data_offsets":[0,8]})"),
               "tensor 'w' has dtype \"F33\"; safetensors dtypes are BOOL");
  EXPECT_ERROR(one(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"), "tensor 'w' has dtype 4");
  EXPECT_ERROR(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"),
               "tensor 'w' has shape [3] and dtype F32 (12 bytes) but data_offsets [0,8] "
               "(8 bytes)");
  EXPECT_ERROR(one(R"({"dtype":"I64","shape":[2],"data_offsets":[0,8]})"),
               "tensor 'w' has shape [2] and dtype I64 (16 bytes)");
  EXPECT_ERROR(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"),
               "tensor 'w' has shape [-2]: every size must be an integer >= 0");
  EXPECT_ERROR(one(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"),
               "every size must be an integer");
  EXPECT_ERROR(one(R"({"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]})"),
               "more bytes than 64 bits count");
  EXPECT_ERROR(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"),
               "tensor 'w' has data_offsets [8,0]; they must be [begin, end]");
  EXPECT_ERROR(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), "data_offsets [0];");
  EXPECT_ERROR(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})"),
               "past the end of the buffer (8 bytes)");
  EXPECT_ERROR(one(R"({"dtype":"F32","shape":[2]})"), "tensor 'w' is not described by exactly");
  EXPECT_ERROR(one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1})"),
               "not described by exactly");
  EXPECT_ERROR(one(R"([1])"), "tensor 'w' is not described");
  EXPECT_ERROR(one(good, std::string(12, '\0')), "bytes [8, 12) at the end of its buffer");
  EXPECT_ERROR(file_of(R"({"__metadata__":{"format":1}})", ""),
               "its \"__metadata__\" entry 'format' is not a string");
  EXPECT_ERROR(file_of(R"({"__metadata__":[]})", ""), "\"__metadata__\" is not an object");

  // Two tensors sharing bytes, or leaving a hole between them.
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  EXPECT_ERROR(file_of("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       std::string(12, '\0')),
               "tensor 'b' starts at byte 4 of the buffer, where tensor 'a' ends at byte 8 "
               "(overlapping");
  EXPECT_ERROR(file_of("{" + a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                       std::string(16, '\0')),
               "tensor 'b' starts at byte 12 of the buffer; bytes [8, 12) belong to no tensor");
  EXPECT_ERROR(file_of(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                       std::string(8, '\0')),
               "bytes [0, 4) belong to no tensor");
}

TEST(Safetensors, DamagedFilesAreErrorsNeverCrashes) {
  const std::vector<float> w(40, 0.5f);
  const int64_t steps = 3;
  const std::string good = train::safetensors_bytes(
      {{"w", "F32", {4, 10}, w.data(), 160}, {"n", "I64", {}, &steps, 8}}, {{"format", "pt"}});
  // Every prefix: the header's length, then the JSON, then the buffer cut short.
  for (size_t k = 0; k < good.size(); ++k) {
    const std::string msg = parse_error(good.substr(0, k));
    EXPECT_NE(msg.find("safetensors file 'm.safetensors'"), std::string::npos) << k << msg;
  }
  // Random bytes overwritten anywhere: read or refused, nothing else (AddressSanitizer builds
  // see any read past the file).
  std::mt19937 rng(5);
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string b = good;
    for (int j = 0; j < 1 + i % 4; ++j) b[rng() % b.size()] = static_cast<char>(rng());
    try {
      const auto f = train::parse_safetensors(b, "m.safetensors");
      uint64_t sum = 0;
      for (const auto& e : f.tensors)
        for (uint64_t k = 0; k < e.end - e.begin; ++k) sum += static_cast<uint8_t>(f.data(e)[k]);
      (void)sum;
    } catch (const std::runtime_error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 100);
}

TEST(Safetensors, ReadNamesAMissingOrSpecialFile) {
  const std::string dir = seqmix::testing::temp_dir("safetensors-read");
  EXPECT_NE(error_of([&] { train::read_safetensors(dir + "/none.safetensors"); })
                .find("safetensors file '" + dir + "/none.safetensors' does not exist"),
            std::string::npos);
  EXPECT_NE(error_of([&] { train::read_safetensors(dir); }).find("is a folder, not a regular file"),
            std::string::npos);
  std::ofstream(dir + "/m.safetensors", std::ios::binary) << file_of("{}", "");
  EXPECT_TRUE(train::read_safetensors(dir + "/m.safetensors").tensors.empty());
}
