// Pathfinder / Path-X generator (include/seqmix/data/pathfinder.h): determinism, sizes,
// token range, class balance, option validation, and every label checked on the rendered
// image alone by a flood fill (not by the generator's bookkeeping): ink is any pixel > 0,
// ink pixels within `paddle_gap + 0.5` of each other are joined (that bridges one dash gap),
// and marker B must be reached from marker A exactly when the label is 1. Negatives are also
// flooded with every radius below `clearance`, which must still not reach marker B.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "seqmix/data/pathfinder.h"
#include "support/cli.h"
#include "support/gradcheck.h"

namespace {

using seqmix::data::generate_pathfinder;
using seqmix::data::LabelledSplits;
using seqmix::data::pathfinder_options;
using seqmix::data::pathfinder_to_pgm;
using seqmix::data::PathfinderExport;
using seqmix::data::PathfinderImage;
using seqmix::data::PathfinderOptions;
using seqmix::data::render_pathfinder_example;
namespace pf = seqmix::data::pathfinder;

// Ink pixels reachable from `start` through ink pixels at squared distance <= max_d2.
std::vector<char> flood(const std::vector<uint8_t>& px, int32_t n, std::array<int32_t, 2> start,
                        int32_t max_d2) {
  std::vector<std::array<int32_t, 2>> offsets;
  const auto reach = static_cast<int32_t>(std::ceil(std::sqrt(max_d2)));
  for (int32_t dr = -reach; dr <= reach; ++dr)
    for (int32_t dc = -reach; dc <= reach; ++dc)
      if ((dr || dc) && dr * dr + dc * dc <= max_d2) offsets.push_back({dr, dc});
  std::vector<char> seen(px.size(), 0);
  std::vector<int32_t> stack;
  const int32_t s = start[0] * n + start[1];
  if (px[static_cast<size_t>(s)] == 0) return seen;
  seen[static_cast<size_t>(s)] = 1;
  stack.push_back(s);
  while (!stack.empty()) {
    const int32_t i = stack.back();
    stack.pop_back();
    const int32_t r = i / n, c = i % n;
    for (const auto& o : offsets) {
      const int32_t rr = r + o[0], cc = c + o[1];
      if (rr < 0 || cc < 0 || rr >= n || cc >= n) continue;
      const auto j = static_cast<size_t>(rr * n + cc);
      if (seen[j] || px[j] == 0) continue;
      seen[j] = 1;
      stack.push_back(static_cast<int32_t>(j));
    }
  }
  return seen;
}

size_t at(const PathfinderImage& im, std::array<int32_t, 2> p) {
  return static_cast<size_t>(p[0] * im.resolution + p[1]);
}

size_t count(const std::vector<char>& v) {
  size_t k = 0;
  for (char c : v) k += c != 0;
  return k;
}

struct FloodStats {
  int checked = 0, dashed = 0;
};

// Checks one image: markers on ink, the label by flood fill, negatives separated by the
// clearance. Counts images whose marked path is broken into dashes at 8-connectivity.
void check_image(const PathfinderOptions& o, const PathfinderImage& im, FloodStats& stats) {
  const int32_t n = o.resolution;
  ASSERT_EQ(im.resolution, n);
  ASSERT_EQ(im.pixels.size(), static_cast<size_t>(n) * n);
  for (const auto& m : {im.marker_a, im.marker_b}) {
    ASSERT_GE(m[0], 1);
    ASSERT_GE(m[1], 1);
    ASSERT_LT(m[0], n - 1);
    ASSERT_LT(m[1], n - 1);
    EXPECT_GT(im.pixels[at(im, m)], 0) << "marker not on ink";
  }
  EXPECT_NE(im.marker_a, im.marker_b);
  for (int32_t i = 0; i < n; ++i)  // ink stays one pixel inside the border
    for (int32_t j : {0, n - 1}) {
      ASSERT_EQ(im.pixels[static_cast<size_t>(i * n + j)], 0);
      ASSERT_EQ(im.pixels[static_cast<size_t>(j * n + i)], 0);
    }
  const double link = o.paddle_gap + 0.5;
  const auto link_d2 = static_cast<int32_t>(std::floor(link * link));
  const std::vector<char> path = flood(im.pixels, n, im.marker_a, link_d2);
  EXPECT_EQ(path[at(im, im.marker_b)] != 0, im.label == 1)
      << "label " << im.label << " but flood fill says otherwise";
  EXPECT_GE(count(path), static_cast<size_t>(o.contour_length));
  if (im.label == 0) {
    // Largest squared distance strictly below the clearance.
    const auto below = static_cast<int32_t>(std::ceil(o.clearance * o.clearance)) - 1;
    const std::vector<char> wide = flood(im.pixels, n, im.marker_a, below);
    EXPECT_EQ(wide[at(im, im.marker_b)], 0) << "paths closer than the clearance";
  }
  const std::vector<char> touching = flood(im.pixels, n, im.marker_a, 2);
  stats.dashed += count(touching) < count(path);
  ++stats.checked;
}

PathfinderOptions small(int32_t resolution, int64_t train, int64_t valid, int64_t test) {
  PathfinderOptions o = pathfinder_options(resolution);
  o.train = train;
  o.valid = valid;
  o.test = test;
  return o;
}

TEST(Pathfinder, DefaultsFollowLra) {
  const PathfinderOptions d;
  const PathfinderOptions p = pathfinder_options(32);
  EXPECT_EQ(p.resolution, 32);
  EXPECT_EQ(p.contour_length, 14);
  EXPECT_EQ(p.paddle_length, d.paddle_length);
  EXPECT_EQ(p.paddle_gap, d.paddle_gap);
  EXPECT_EQ(p.paddle_thickness, d.paddle_thickness);
  EXPECT_EQ(p.n_distractors, d.n_distractors);
  EXPECT_EQ(p.distractor_length, d.distractor_length);
  EXPECT_EQ(p.max_turn, d.max_turn);
  EXPECT_EQ(p.seed_distance, d.seed_distance);
  EXPECT_EQ(p.marker_radius, d.marker_radius);
  EXPECT_EQ(p.clearance, d.clearance);
  EXPECT_EQ(p.contrast, d.contrast);
  const PathfinderOptions x = pathfinder_options(128);
  EXPECT_EQ(x.resolution, 128);
  EXPECT_EQ(x.contour_length, 14);
  EXPECT_GT(x.paddle_length, p.paddle_length);  // paths scaled up to span the image
  EXPECT_GT(x.seed_distance, p.seed_distance);
  EXPECT_EQ(pf::kVocabSize, 256);
  EXPECT_EQ(pf::kClasses, 2);
}

TEST(Pathfinder, ValidatesOptions) {
  auto expect_invalid = [](const PathfinderOptions& o, const std::string& name) {
    try {
      render_pathfinder_example(o, 0, 1);
      ADD_FAILURE() << "accepted bad " << name;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  };
  auto with = [](auto edit) {
    PathfinderOptions o;
    edit(o);
    return o;
  };
  expect_invalid(with([](PathfinderOptions& o) { o.resolution = 8; }), "resolution");
  expect_invalid(with([](PathfinderOptions& o) { o.contour_length = 0; }), "contour_length");
  expect_invalid(with([](PathfinderOptions& o) { o.paddle_length = 0; }), "paddle_length");
  expect_invalid(with([](PathfinderOptions& o) { o.paddle_gap = 0; }), "paddle_gap");
  expect_invalid(with([](PathfinderOptions& o) { o.paddle_thickness = 0.1; }), "paddle_thickness");
  expect_invalid(with([](PathfinderOptions& o) { o.n_distractors = -1; }), "n_distractors");
  expect_invalid(with([](PathfinderOptions& o) { o.distractor_length = 0; }), "distractor_length");
  expect_invalid(with([](PathfinderOptions& o) { o.max_turn = 0.0; }), "max_turn");
  expect_invalid(with([](PathfinderOptions& o) { o.max_turn = 4.0; }), "max_turn");
  expect_invalid(with([](PathfinderOptions& o) { o.seed_distance = 0; }), "seed_distance");
  expect_invalid(with([](PathfinderOptions& o) { o.seed_distance = 9; }), "seed_distance");
  expect_invalid(with([](PathfinderOptions& o) { o.marker_radius = 0.5; }), "marker_radius");
  expect_invalid(with([](PathfinderOptions& o) { o.clearance = o.paddle_gap + 0.5; }), "clearance");
  expect_invalid(with([](PathfinderOptions& o) { o.contrast = 0.0; }), "contrast");
  EXPECT_THROW(render_pathfinder_example(PathfinderOptions{}, 0, 2), std::invalid_argument);
  EXPECT_THROW(pathfinder_options(15), std::invalid_argument);
  for (auto field :
       {&PathfinderOptions::train, &PathfinderOptions::valid, &PathfinderOptions::test}) {
    PathfinderOptions o = small(32, 2, 2, 2);
    o.*field = -1;
    EXPECT_THROW(generate_pathfinder(o), std::invalid_argument);
  }
}

// The side is bounded (LRA's sides are 32, 64, 128 and 256): 100000 used to allocate 10^10
// pixels and fail with "out of memory".
TEST(Pathfinder, ResolutionIsBounded) {
  for (int32_t r : {15, 257, 100000, -1}) {
    try {
      pathfinder_options(r);
      ADD_FAILURE() << "accepted resolution " << r;
    } catch (const std::invalid_argument& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("`resolution` must be in [16, 256]"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("got " + std::to_string(r)), std::string::npos) << msg;
    }
    PathfinderOptions o;
    o.resolution = r;
    EXPECT_THROW(render_pathfinder_example(o, 0, 1), std::invalid_argument) << r;
    o.train = o.valid = o.test = 1;
    EXPECT_THROW(generate_pathfinder(o), std::invalid_argument) << r;
  }
  EXPECT_EQ(pathfinder_options(PathfinderOptions::kMaxResolution).resolution, 256);
}

// The options of `seqmix data pathfinder`, each error naming its flag.
TEST(Pathfinder, ExportOptionsAreBounded) {
  auto error_of = [](int32_t resolution, int64_t count, int64_t seed) -> std::string {
    try {
      seqmix::data::validate_pathfinder_export(resolution, count, seed);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error_of(32, 1, 0), "");
  EXPECT_EQ(error_of(32, 100000, 10000000000000), "");
  EXPECT_EQ(error_of(128, 100000, 0), "");  // 1.6 * 10^9 pixels
  EXPECT_EQ(error_of(256, 32768, 0), "");   // 2^31 pixels
  struct Case {
    int32_t resolution;
    int64_t count, seed;
    const char* expect;
  };
  for (const Case& c : std::vector<Case>{
           {100000, 16, 0, "`resolution` must be in [16, 256] pixels"},
           {32, 0, 0, "`count` must be in [1, 100000] images, got 0"},
           {32, -5, 0, "`count` must be in [1, 100000] images, got -5"},
           {32, 1000000000, 0, "`count` must be in [1, 100000] images, got 1000000000"},
           {32, 16, -1, "`seed` must be in [0, 10000000000000], got -1"},
           {32, 16, 10000000000001, "`seed` must be in [0, 10000000000000], got 10000000000001"},
           {32, 16, std::numeric_limits<int64_t>::max(), "`seed` must be in [0, "},
           {256, 32769, 0, "lower `count` or `resolution`"},
           {256, 100000, 0, "`count` 100000 images of `resolution` 256 hold 6553600000 pixels"},
       }) {
    const std::string msg = error_of(c.resolution, c.count, c.seed);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in '"
                                                     << msg << "'";
    EXPECT_EQ(msg.rfind("pathfinder: ", 0), 0u) << msg;
  }
  // Example seeds: seed * 1000003 + index, without wrapping up to the bounds.
  EXPECT_EQ(seqmix::data::pathfinder_export_seed(0, 7), 7u);
  EXPECT_EQ(seqmix::data::pathfinder_export_seed(3, 5), 3u * 1000003u + 5u);
  const uint64_t last = seqmix::data::pathfinder_export_seed(
      PathfinderExport::kMaxSeed, PathfinderExport::kMaxCount - 1);
  EXPECT_EQ((last - (PathfinderExport::kMaxCount - 1)) / 1000003u,
            static_cast<uint64_t>(PathfinderExport::kMaxSeed));
  EXPECT_LT(PathfinderExport::kMaxCount, 1000003);  // consecutive seeds' images never meet
}

TEST(Pathfinder, DeterministicSizesRangeBalance) {
  const PathfinderOptions o = small(32, 40, 10, 12);
  const LabelledSplits a = generate_pathfinder(o);
  const LabelledSplits b = generate_pathfinder(o);
  ASSERT_EQ(a.train.size(), 40u);
  ASSERT_EQ(a.valid.size(), 10u);
  ASSERT_EQ(a.test.size(), 12u);
  for (const auto* split : {&a.train, &a.valid, &a.test}) {
    int positives = 0;
    for (const auto& e : *split) {
      ASSERT_EQ(e.tokens.size(), 1024u);
      EXPECT_TRUE(e.tokens_b.empty());
      ASSERT_TRUE(e.label == 0 || e.label == 1);
      positives += e.label;
      int ink = 0;
      for (int32_t t : e.tokens) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, pf::kVocabSize);
        ink += t > 0;
      }
      EXPECT_GT(ink, 30);
      EXPECT_LT(ink, 600);
    }
    EXPECT_EQ(2 * positives, static_cast<int>(split->size()));  // balanced in pairs
  }
  for (size_t i = 0; i < a.train.size(); ++i) {
    EXPECT_EQ(a.train[i].tokens, b.train[i].tokens);
    EXPECT_EQ(a.train[i].label, b.train[i].label);
  }
  EXPECT_EQ(a.test.back().tokens, b.test.back().tokens);
  // Labels are not a fixed alternation, and splits come from different seeds.
  int alternations = 0;
  for (size_t i = 1; i < a.train.size(); ++i)
    alternations += a.train[i].label != a.train[i - 1].label;
  EXPECT_LT(alternations, 39);
  EXPECT_NE(a.train[0].tokens, a.valid[0].tokens);
  EXPECT_NE(a.valid[0].tokens, a.test[0].tokens);

  PathfinderOptions other = o;
  other.seed = 1;
  const LabelledSplits c = generate_pathfinder(other);
  int same = 0;
  for (size_t i = 0; i < a.train.size(); ++i) same += a.train[i].tokens == c.train[i].tokens;
  EXPECT_EQ(same, 0);

  // Larger splits start with the same examples (each example's seed is its own).
  const LabelledSplits d = generate_pathfinder(small(32, 50, 10, 12));
  EXPECT_EQ(d.train[39].tokens, a.train[39].tokens);
}

TEST(Pathfinder, RenderIsDeterministicPerSeed) {
  const PathfinderOptions o;
  const PathfinderImage a = render_pathfinder_example(o, 77, 1);
  const PathfinderImage b = render_pathfinder_example(o, 77, 1);
  const PathfinderImage c = render_pathfinder_example(o, 78, 1);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_EQ(a.marker_a, b.marker_a);
  EXPECT_EQ(a.marker_b, b.marker_b);
  EXPECT_NE(a.pixels, c.pixels);
}

TEST(Pathfinder, LabelsMatchFloodFill32) {
  const PathfinderOptions o = pathfinder_options(32);
  FloodStats stats;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    const PathfinderImage im = render_pathfinder_example(o, seed, static_cast<int32_t>(seed % 2));
    ASSERT_EQ(im.label, static_cast<int32_t>(seed % 2));
    EXPECT_EQ(im.pixels[at(im, im.marker_a)], 255);  // markers are full white discs
    EXPECT_EQ(im.pixels[at(im, im.marker_b)], 255);
    check_image(o, im, stats);
    if (HasFailure()) FAIL() << "seed " << seed;
  }
  // The paths are dashed: at 8-connectivity the marked path falls apart into dashes.
  EXPECT_GE(stats.dashed, stats.checked * 95 / 100);
}

// The generated splits themselves: at 32x32 (0.5-pixel lines at gain 1.5, peak ~215) only
// marker pixels reach 255, so the markers are found from the tokens alone.
TEST(Pathfinder, GeneratedLabelsMatchFloodFill32) {
  const PathfinderOptions o = small(32, 0, 0, 80);
  const LabelledSplits s = generate_pathfinder(o);
  const double link = o.paddle_gap + 0.5;
  const auto link_d2 = static_cast<int32_t>(std::floor(link * link));
  for (const auto& e : s.test) {
    std::vector<uint8_t> px(e.tokens.begin(), e.tokens.end());
    std::vector<uint8_t> white(px.size());
    for (size_t i = 0; i < px.size(); ++i) white[i] = px[i] == 255;
    std::vector<std::array<int32_t, 2>> markers;
    std::vector<char> taken(px.size(), 0);
    for (int32_t i = 0; i < 1024; ++i) {
      if (!white[static_cast<size_t>(i)] || taken[static_cast<size_t>(i)]) continue;
      const std::array<int32_t, 2> m{i / 32, i % 32};
      const std::vector<char> blob = flood(white, 32, m, 2);
      for (size_t j = 0; j < blob.size(); ++j) taken[j] |= blob[j];
      markers.push_back(m);
    }
    ASSERT_EQ(markers.size(), 2u) << "expected two marker discs";
    const std::vector<char> path = flood(px, 32, markers[0], link_d2);
    EXPECT_EQ(path[static_cast<size_t>(markers[1][0] * 32 + markers[1][1])] != 0, e.label == 1);
  }
}

TEST(Pathfinder, LabelsMatchFloodFill128) {
  const PathfinderOptions o = pathfinder_options(128);
  FloodStats stats;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    const PathfinderImage im = render_pathfinder_example(o, seed, static_cast<int32_t>(seed % 2));
    EXPECT_EQ(im.pixels[at(im, im.marker_a)], 255);
    check_image(o, im, stats);
    if (HasFailure()) FAIL() << "seed " << seed;
  }
  EXPECT_EQ(stats.dashed, stats.checked);
  const LabelledSplits s = generate_pathfinder(small(128, 4, 2, 2));
  ASSERT_EQ(s.train.size(), 4u);
  EXPECT_EQ(s.train[0].tokens.size(), 16384u);
  EXPECT_EQ(s.train[0].label + s.train[1].label, 1);
}

TEST(Pathfinder, OtherResolutions) {
  for (int32_t r : {16, 48, 64, 96, 256}) {
    const PathfinderOptions o = pathfinder_options(r);
    FloodStats stats;
    for (uint64_t seed = 0; seed < 4; ++seed) {
      check_image(o, render_pathfinder_example(o, seed, static_cast<int32_t>(seed % 2)), stats);
      if (HasFailure()) FAIL() << "resolution " << r << " seed " << seed;
    }
  }
}

TEST(Pathfinder, Pgm) {
  const PathfinderImage im = render_pathfinder_example(PathfinderOptions{}, 3, 0);
  const std::string pgm = pathfinder_to_pgm(im);
  const std::string header = "P5\n32 32\n255\n";
  ASSERT_EQ(pgm.size(), header.size() + 1024);
  EXPECT_EQ(pgm.substr(0, header.size()), header);
  EXPECT_EQ(static_cast<uint8_t>(pgm[header.size() + at(im, im.marker_a)]), 255);
  PathfinderImage bad = im;
  bad.pixels.pop_back();
  EXPECT_THROW(pathfinder_to_pgm(bad), std::invalid_argument);
}
}  // namespace
