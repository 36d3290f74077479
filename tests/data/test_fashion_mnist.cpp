// IDX reader and the Fashion-MNIST "Image" task (include/seqmix/data/fashion_mnist.h):
// hand-made files (plain and gzip) parse exactly, corrupt ones fail naming the file, and the
// real data (installed by scripts/setup.sh) has the documented splits.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include "seqmix/data/fashion_mnist.h"
#include "support/gradcheck.h"  // temp_dir

namespace {

std::string idx_bytes(const std::vector<uint32_t>& dims, const std::string& data) {
  std::string s = {0, 0, 8, static_cast<char>(dims.size())};
  for (uint32_t d : dims)
    for (int k = 3; k >= 0; --k) s += static_cast<char>((d >> (8 * k)) & 0xff);
  return s + data;
}

void write_plain(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void write_gzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  gzclose(f);
}

void expect_error(const std::string& path, int rank, const std::string& needle) {
  try {
    seqmix::data::read_idx(path, rank);
    FAIL() << "expected an error for " << path;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << what;
  }
}

TEST(Idx, ReadsPlainAndGzipAndRejectsCorruptFiles) {
  const std::string dir = seqmix::testing::temp_dir("idx");
  const std::string data = {1, 2, 3, 4, 5, 6};
  write_plain(dir + "/a.idx", idx_bytes({2, 1, 3}, data));
  write_gzip(dir + "/a.idx.gz", idx_bytes({2, 1, 3}, data));
  for (const char* name : {"/a.idx", "/a.idx.gz"}) {
    const auto a = seqmix::data::read_idx(dir + name, 3);
    EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 1, 3})) << name;
    EXPECT_EQ(std::string(a.data.begin(), a.data.end()), data) << name;
  }
  expect_error(dir + "/missing.idx", 3, "no such file");
  expect_error(dir + "/a.idx", 1, "3 dimensions");
  write_plain(dir + "/short.idx", idx_bytes({2, 1, 3}, data.substr(0, 5)));
  expect_error(dir + "/short.idx", 3, "header says 6 bytes of data, file has 5");
  write_plain(dir + "/long.idx", idx_bytes({2, 1, 3}, data + "x"));
  expect_error(dir + "/long.idx", 3, "file has 7");
  write_plain(dir + "/magic.idx", std::string("\x00\x00\x0d\x03", 4) + std::string(12, '\0'));
  expect_error(dir + "/magic.idx", 3, "magic");
  write_plain(dir + "/tiny.idx", std::string("\x00\x00", 2));
  expect_error(dir + "/tiny.idx", 3, "magic number");
  // A gzip file cut in half.
  const std::string gz = [&] {
    std::ifstream in(dir + "/a.idx.gz", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  write_plain(dir + "/cut.idx.gz", gz.substr(0, gz.size() / 2));
  EXPECT_THROW(seqmix::data::read_idx(dir + "/cut.idx.gz", 3), std::runtime_error);
}

TEST(FashionMnist, SplitsOfTheInstalledData) {
  const std::string dir = "data/fashion-mnist";
  const std::string root = std::filesystem::path(SEQMIX_SOURCE_DIR) / dir;
  if (!std::filesystem::exists(root + "/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << root << " not installed (scripts/setup.sh)";
  const auto d = seqmix::data::load_fashion_mnist(root);
  EXPECT_EQ(d.train.size(), 55000u);
  EXPECT_EQ(d.valid.size(), 5000u);
  EXPECT_EQ(d.test.size(), 10000u);
  std::vector<int> per_class(10, 0);
  for (const auto& s : d.test) {
    ASSERT_EQ(s.tokens.size(), 784u);
    ++per_class[static_cast<size_t>(s.label)];
  }
  for (int c : per_class) EXPECT_EQ(c, 1000);  // the test set is balanced
  EXPECT_THROW(seqmix::data::load_fashion_mnist(root, 60000), std::invalid_argument);
  EXPECT_THROW(seqmix::data::load_fashion_mnist("/nonexistent"), std::runtime_error);
}

}  // namespace
