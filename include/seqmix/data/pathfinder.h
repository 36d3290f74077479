#pragma once
/// @file pathfinder.h
/// Pathfinder and Path-X as the Long Range Arena uses them (Tay et al. 2020, "Long Range
/// Arena", Sec. 3.5), generated here deterministically from a seed. The images follow the
/// "snakes2" generator of Linsley et al. 2018 ("Learning long-range spatial dependencies with
/// horizontal gated recurrent units", github.com/drewlinsley/pathfinder, snakes2.py), with the
/// settings LRA documents in lra_benchmarks/data/pathfinder.py.
///
/// An example is a grayscale image (0 = black background .. 255) holding two "target" paths,
/// `n_distractors` shorter distractor paths and two markers (filled discs). A path is a chain
/// of `contour_length` short straight dashes ("paddles") of `paddle_length` pixels, separated
/// by gaps of `paddle_gap` pixels; at each gap the direction turns by an angle d drawn with
/// density proportional to cos^2(pi/2 * d / max_turn) on (-max_turn, max_turn) (snakes2's
/// cos^2(continuity * d) with max_turn = pi / (2 continuity)). Marker A sits on the first end
/// ("origin") of one target path; marker B on the far end ("terminal") of the same path
/// (label 1, connected) or of the other target path (label 0). The two origins are
/// `seed_distance` pixels apart and lie at least 2 * seed_distance from the image border, as
/// in snakes2, so both classes look alike near the markers. The image is flattened row-major
/// into `resolution^2` tokens, one 8-bit intensity each (vocabulary 256).
///
/// Guarantees (checked on the image, not only on the generator's bookkeeping):
///  - background pixels are exactly 0; ink pixels (a dash's or marker's 4x4-supersampled
///    coverage >= 1/4) are >= 1;
///  - consecutive dashes of one path, and a marker and its dash, have ink pixels within
///    Euclidean distance `paddle_gap + 0.5` (pixel centres);
///  - ink pixels of different paths (markers included) are at distance >= `clearance`,
///    and clearance > paddle_gap + 0.5. So flooding the ink from marker A with any radius in
///    [paddle_gap + 0.5, clearance) reaches marker B exactly when the label is 1;
///  - every ink pixel lies at least one pixel inside the border (snakes2's padding = 1).
///
/// Differences from snakes2: geometry is continuous (no per-pixel candidate grid); a turn is
/// drawn from its density restricted to the turns whose dash fits (snakes2 likewise samples
/// only free directions), by rejection and then over a fan of 16 evenly spaced turns; a
/// target path at a dead end loses its last 3 dashes and regrows (up to 8 times, then the
/// example starts afresh from the same random stream; snakes2 only restarts); a distractor
/// that finds no room in 16 placements is dropped (snakes2 also allows incomplete distractor
/// sets; at 32x32 about half of the 5 fit); no single-paddle clutter (LRA's
/// use_single_paddles setting is not recorded; the wrapper script turns it off); lines are
/// anti-aliased by 4x4 supersampling instead of Lanczos downsampling; classes are exactly
/// balanced in consecutive pairs (snakes2 draws each label at random).
///
/// Speed (one core): 20000 Pathfinder-32 images in about 8 s, 2000 Path-X images in about 2 s.
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "seqmix/data/labelled.h"

namespace seqmix::data {

namespace pathfinder {
constexpr int32_t kVocabSize = 256;  ///< tokens are pixel intensities 0..255
constexpr int32_t kClasses = 2;      ///< 1: the markers are on one path, 0: on two
}  // namespace pathfinder

/// Generation settings. The member defaults are Pathfinder-32 "hard" (LRA's Pathfinder task),
/// equal to pathfinder_options(32). LRA's snakes2 settings at 32x32: contour_length 14,
/// paddle_length 2, paddle margin 1 (gap 2 x margin), paddle_thickness 0.5 at antialias
/// scale 2, marker_radius 1.5, seed_distance 7, continuity 1.0 (max turn pi/2), distractor
/// length 14 // 3 = 4, 20 // 4 = 5 distractors, contrast 2 x 0.75. At 128x128 (Path-X):
/// paddle_length 5, margin 2 or 3, thickness 1.5, marker_radius 3, seed_distance 20,
/// continuity 1.8 (max turn 50 degrees), distractor length 4, 35 / 4 = 8 distractors
/// (Python 2 integer division), contrast 0.9. LRA used 200K images per setting, split
/// 80% / 10% / 10% = 160K / 20K / 20K (lra_benchmarks/image/input_pipeline.py); the
/// defaults here are CPU-sized.
struct PathfinderOptions {
  int32_t resolution = 32;               ///< image side in pixels, [16, kMaxResolution]
  int32_t contour_length = 14;           ///< dashes per target path (LRA "hard": 14)
  int32_t paddle_length = 2;             ///< dash length in pixels (centre line)
  int32_t paddle_gap = 2;                ///< gap between consecutive dashes, pixels (>= 1)
  double paddle_thickness = 0.5;         ///< dash width in pixels (>= 0.5)
  int32_t n_distractors = 5;             ///< distractor paths besides the two target paths
  int32_t distractor_length = 4;         ///< dashes per distractor path
  double max_turn = 1.5707963267948966;  ///< max direction change per dash, radians (0, pi]
  int32_t seed_distance = 7;             ///< distance between the two target paths' origins, pixels
  double marker_radius = 1.5;            ///< marker disc radius, pixels
  double clearance = 2.8;                ///< min distance between ink of different paths, pixels
  double contrast = 1.5;                 ///< path intensity gain (255 * gain * coverage, clipped)
  int64_t train = 20000, valid = 2000, test = 2000;  ///< LRA: 160000 / 20000 / 20000
  uint64_t seed = 0;

  /// The largest side accepted: LRA's largest Pathfinder set (256, "Path-256"). Rendering
  /// time grows like the side's fourth power (one core: 0.001 s per image at 128, 0.012 s at
  /// 256, 0.2 s at 512, 2.6 s at 1024) and an image holds side^2 bytes.
  static constexpr int32_t kMinResolution = 16, kMaxResolution = 256;
};

/// Defaults for a resolution. Below 96 pixels: LRA's Pathfinder-32 settings, lengths scaled
/// by resolution / 32; from 96 on: LRA's Path-X (128) settings (paddle_length 5, gap 5, the
/// mean of LRA's margins {2, 3} times 2, clearance 6), lengths scaled by resolution / 128.
/// @throws std::invalid_argument naming `resolution` outside
///         [kMinResolution, kMaxResolution].
PathfinderOptions pathfinder_options(int32_t resolution);

/// Bounds of `seqmix data pathfinder`, which writes `count` example images (binary PGM, about
/// resolution^2 bytes each) rendered from pathfinder_export_seed(seed, i), i < count.
struct PathfinderExport {
  static constexpr int64_t kMaxCount = 100000;
  /// Below this, seed * 1000003 + i (i < kMaxCount) never wraps: every (seed, i) pair renders
  /// from a different example seed.
  static constexpr int64_t kMaxSeed = 10000000000000;  // 10^13
  /// count * resolution^2: about 2 GB of images (100,000 at 128; 32,768 at 256).
  static constexpr int64_t kMaxPixels = int64_t{1} << 31;
};

/// Checks the export's options, before anything is written.
/// @throws std::invalid_argument naming the argument: `resolution` as pathfinder_options,
///         `count` outside [1, kMaxCount], `seed` outside [0, kMaxSeed], or `count` and
///         `resolution` together above kMaxPixels.
void validate_pathfinder_export(int32_t resolution, int64_t count, int64_t seed);

/// The example seed of image `index` of an export with `seed`: seed * 1000003 + index.
uint64_t pathfinder_export_seed(int64_t seed, int64_t index);

/// One rendered example.
struct PathfinderImage {
  int32_t resolution = 0;
  std::vector<uint8_t> pixels;                    ///< resolution^2 intensities, row-major
  int32_t label = 0;                              ///< 1 when both markers are on the same path
  std::array<int32_t, 2> marker_a{}, marker_b{};  ///< (row, col) of the marker centres
};

/// Renders the example drawn from `example_seed` with the given label (0 or 1).
/// Deterministic: equal arguments give equal images on every platform with IEEE doubles
/// (uniforms come from 64-bit integers; only std::sin/cos/sqrt are used from libm).
/// @throws std::invalid_argument for invalid options (naming the option) or a label other
///         than 0 or 1; std::runtime_error if the geometry leaves no room for the two target
///         paths after 10000 restarts (not reached with pathfinder_options' settings).
PathfinderImage render_pathfinder_example(const PathfinderOptions& options, uint64_t example_seed,
                                          int32_t label);

/// Generates the three splits: example i of split s (0 train, 1 valid, 2 test) is rendered
/// from a seed mixed (splitmix64) from (options.seed, s, i); labels are balanced exactly in
/// consecutive pairs (one 0 and one 1 per pair, order drawn from the seed). Tokens are the
/// pixel intensities. Deterministic for equal options.
/// @throws std::invalid_argument naming the option for invalid options (see
///         render_pathfinder_example) or negative split sizes.
LabelledSplits generate_pathfinder(const PathfinderOptions& options);

/// The image as a binary PGM (P5) file's bytes, for looking at examples.
std::string pathfinder_to_pgm(const PathfinderImage& image);

}  // namespace seqmix::data
