#include "seqmix/data/pathfinder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "seqmix/util/rng.h"

namespace seqmix::data {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int32_t kSub = 4;               // supersampling per axis
constexpr int32_t kMinCoverage = 4;       // of kSub^2 subsamples: a pixel below this is not ink
constexpr int32_t kBorder = 1;            // ink stays this many pixels inside the image
constexpr int32_t kTurnTries = 4;         // turns drawn by rejection before enumerating a fan
constexpr size_t kFan = 16;               // evenly spaced turns tried when rejection fails
constexpr int32_t kSeedTries = 16;        // placements of the second target origin
constexpr int32_t kDistractorTries = 16;  // placements of one distractor before dropping it
constexpr int32_t kBacktrack = 3;         // dashes removed from a target path at a dead end
constexpr int32_t kBacktracks = 8;        // dead ends allowed before the example restarts
constexpr int32_t kMaxRestarts = 10000;   // fresh starts of one example's target paths

using util::mix64;
using util::Rng;
constexpr uint64_t kGolden = util::kSplitMixGamma;

struct Point {
  double y, x;
};

Point along(Point p, double angle, double dist) {
  return {p.y + dist * std::sin(angle), p.x + dist * std::cos(angle)};
}

// One rasterized pixel of a dash or a marker disc.
struct Ink {
  int32_t index;    // row * n + col
  int32_t covered;  // subsamples inside the shape, kMinCoverage .. kSub^2
  bool disc;        // a marker disc's pixel, not a dash's
};

struct Offset {
  int32_t dr, dc, d2;
};

void validate(const PathfinderOptions& o) {
  auto fail = [](const std::string& what) {
    throw std::invalid_argument("pathfinder: invalid option " + what);
  };
  if (o.resolution < PathfinderOptions::kMinResolution ||
      o.resolution > PathfinderOptions::kMaxResolution)
    fail("resolution (must be in [" + std::to_string(PathfinderOptions::kMinResolution) + ", " +
         std::to_string(PathfinderOptions::kMaxResolution) + "]), got " +
         std::to_string(o.resolution));
  if (o.contour_length < 1) fail("contour_length (must be >= 1)");
  if (o.paddle_length < 1) fail("paddle_length (must be >= 1)");
  if (o.paddle_gap < 1) fail("paddle_gap (must be >= 1)");
  if (!(o.paddle_thickness >= 0.5) || !std::isfinite(o.paddle_thickness))
    fail("paddle_thickness (must be >= 0.5)");
  if (o.n_distractors < 0) fail("n_distractors (must be >= 0)");
  if (o.distractor_length < 1) fail("distractor_length (must be >= 1)");
  if (!(o.max_turn > 0.0 && o.max_turn <= kPi)) fail("max_turn (must be in (0, pi])");
  if (o.seed_distance < 1 || 4 * static_cast<int64_t>(o.seed_distance) > o.resolution)
    fail("seed_distance (must be in [1, resolution / 4])");
  if (!(o.marker_radius >= 1.0) || o.marker_radius > o.resolution / 4.0)
    fail("marker_radius (must be in [1, resolution / 4])");
  if (!(o.clearance > o.paddle_gap + 0.5) || o.clearance > o.resolution / 2.0)
    fail("clearance (must be > paddle_gap + 0.5 and <= resolution / 2)");
  if (!(o.contrast > 0.0) || !std::isfinite(o.contrast)) fail("contrast (must be > 0)");
}

void validate_sizes(const PathfinderOptions& o) {
  if (o.train < 0) throw std::invalid_argument("pathfinder: invalid option train (must be >= 0)");
  if (o.valid < 0) throw std::invalid_argument("pathfinder: invalid option valid (must be >= 0)");
  if (o.test < 0) throw std::invalid_argument("pathfinder: invalid option test (must be >= 0)");
}

// Widens [l, h] by the x-interval where the row y meets the disc of squared radius rr at c.
void disc_span(Point c, double y, double rr, double& l, double& h) {
  const double dy = y - c.y, q = rr - dy * dy;
  if (q < 0.0) return;
  const double w = std::sqrt(q);
  l = std::min(l, c.x - w);
  h = std::max(h, c.x + w);
}

// Narrows [l, h] to the X with lo <= alpha X + beta <= hi.
void clip(double alpha, double beta, double lo, double hi, double& l, double& h) {
  if (alpha == 0.0) {
    if (beta < lo || beta > hi) l = kInf, h = -kInf;
    return;
  }
  double x0 = (lo - beta) / alpha, x1 = (hi - beta) / alpha;
  if (x0 > x1) std::swap(x0, x1);
  l = std::max(l, x0);
  h = std::min(h, x1);
}

// How many of one pixel's kSub subsample columns, at offsets (j + 0.5) / kSub, lie in [l, h].
int32_t count_in(double l, double h) {
  if (!(l <= h)) return 0;
  l = std::clamp(l * kSub - 0.5, -1.0, double{kSub});
  h = std::clamp(h * kSub - 0.5, -1.0, double{kSub});
  const auto j0 = std::max<int32_t>(0, static_cast<int32_t>(std::ceil(l)));
  const auto j1 = std::min<int32_t>(kSub - 1, static_cast<int32_t>(std::floor(h)));
  return std::max<int32_t>(0, j1 - j0 + 1);
}

// The image under construction: which path (and which of its dashes) owns each pixel, and
// the dashes' coverage. Marker discs are reserved at all four target ends (so nothing comes
// near them) but drawn only where the markers go.
class Canvas {
 public:
  explicit Canvas(const PathfinderOptions& o)
      : n_(o.resolution),
        radius_(0.5 * o.paddle_thickness),
        link2_((o.paddle_gap + 0.5) * (o.paddle_gap + 0.5)),
        owner_(static_cast<size_t>(n_) * n_),
        tag_(owner_.size()),
        cover_(owner_.size()) {
    const double clear2 = o.clearance * o.clearance;
    const auto reach = static_cast<int32_t>(std::ceil(o.clearance));
    for (int32_t dr = -reach; dr <= reach; ++dr)
      for (int32_t dc = -reach; dc <= reach; ++dc)
        if (dr * dr + dc * dc < clear2) near_.push_back({dr, dc, dr * dr + dc * dc});
  }

  void clear() {
    std::fill(owner_.begin(), owner_.end(), 0);
    std::fill(tag_.begin(), tag_.end(), 0);
    std::fill(cover_.begin(), cover_.end(), 0);
  }

  // Appends the ink of the capsule a-b of the given radius (a disc when a == b). False when
  // some ink would fall outside the image interior. Each row of subsamples meets the
  // (convex) capsule in one interval, the union of its two end discs' and its slab's.
  bool raster(Point a, Point b, double radius, bool disc, std::vector<Ink>& out) const {
    const double vy = b.y - a.y, vx = b.x - a.x, len2 = vy * vy + vx * vx;
    const double rr = radius * radius, rl = radius * std::sqrt(len2);
    const auto r0 = static_cast<int32_t>(std::floor(std::min(a.y, b.y) - radius));
    const auto r1 = static_cast<int32_t>(std::floor(std::max(a.y, b.y) + radius));
    std::array<double, kSub> lo{}, hi{};
    for (int32_t r = r0; r <= r1; ++r) {
      double row_lo = kInf, row_hi = -kInf;
      for (int32_t i = 0; i < kSub; ++i) {
        const double y = r + (i + 0.5) / kSub;
        double l = kInf, h = -kInf;
        disc_span(a, y, rr, l, h);
        disc_span(b, y, rr, l, h);
        if (len2 > 0.0) {  // 0 <= (p - a).v <= |v|^2 and |v x (p - a)| <= r |v|
          const double dy = y - a.y;
          double sl = -kInf, sh = kInf;
          clip(vx, vy * dy, 0.0, len2, sl, sh);
          clip(-vy, vx * dy, -rl, rl, sl, sh);
          if (sl <= sh) {
            l = std::min(l, a.x + sl);
            h = std::max(h, a.x + sh);
          }
        }
        lo[static_cast<size_t>(i)] = l;
        hi[static_cast<size_t>(i)] = h;
        row_lo = std::min(row_lo, l);
        row_hi = std::max(row_hi, h);
      }
      if (row_lo > row_hi) continue;
      const auto c0 = static_cast<int32_t>(std::floor(row_lo));
      const auto c1 = static_cast<int32_t>(std::floor(row_hi));
      for (int32_t c = c0; c <= c1; ++c) {
        int32_t covered = 0;
        for (size_t i = 0; i < kSub; ++i) covered += count_in(lo[i] - c, hi[i] - c);
        if (covered < kMinCoverage) continue;
        if (r < kBorder || c < kBorder || r >= n_ - kBorder || c >= n_ - kBorder) return false;
        out.push_back({r * n_ + c, covered, disc});
      }
    }
    return true;
  }

  // Whether the capsule a-b of the given radius lies in [kBorder, n - kBorder] (then all
  // its ink lies in the interior; checked before rasterizing, which is the costly part).
  bool inside(Point a, Point b, double radius) const {
    const double lo = kBorder + radius, hi = n_ - kBorder - radius;
    return std::min(a.y, b.y) >= lo && std::min(a.x, b.x) >= lo && std::max(a.y, b.y) <= hi &&
           std::max(a.x, b.x) <= hi;
  }

  bool raster_dash(Point a, Point b, std::vector<Ink>& out) const {
    return inside(a, b, radius_) && raster(a, b, radius_, false, out);
  }

  // Whether `ink`, as dash `dash` of path `path`, keeps the clearance from every other path
  // and from the path's own dashes before dash - 1, and (for dash > 0) links to dash - 1:
  // some dash pixel within paddle_gap + 0.5 of a dash pixel of the previous dash.
  bool fits(const std::vector<Ink>& ink, int32_t path, int32_t dash) const {
    const int32_t me = path + 1;
    bool linked = dash == 0;
    for (const Ink& k : ink) {
      const int32_t r = k.index / n_, c = k.index % n_;
      for (const Offset& o : near_) {
        const int32_t rr = r + o.dr, cc = c + o.dc;
        if (rr < 0 || cc < 0 || rr >= n_ || cc >= n_) continue;
        const size_t j = static_cast<size_t>(rr) * n_ + cc;
        if (owner_[j] == 0) continue;
        if (owner_[j] != me || tag_[j] < dash - 1) return false;
        if (!linked && !k.disc && tag_[j] == dash - 1 && cover_[j] > 0 && o.d2 <= link2_)
          linked = true;
      }
    }
    return linked;
  }

  void commit(const std::vector<Ink>& ink, int32_t path, int32_t dash) {
    for (const Ink& k : ink) {
      const auto j = static_cast<size_t>(k.index);
      owner_[j] = path + 1;
      tag_[j] = dash;
      if (!k.disc) cover_[j] = std::max(cover_[j], k.covered);
    }
  }

  void erase(const std::vector<Ink>& ink) {
    for (const Ink& k : ink) {
      const auto j = static_cast<size_t>(k.index);
      owner_[j] = 0;
      tag_[j] = 0;
      cover_[j] = 0;
    }
  }

  int32_t cover(size_t j) const { return cover_[j]; }

 private:
  int32_t n_;
  double radius_, link2_;
  std::vector<int32_t> owner_;  // path + 1; 0 for free pixels
  std::vector<int32_t> tag_;    // the last dash drawn on the pixel
  std::vector<int32_t> cover_;  // max dash coverage (subsamples), 0 where only discs reserve
  std::vector<Offset> near_;    // offsets closer than the clearance
};

// Draws paths dash by dash: dash k runs from a_k to b_k = a_k + L d_k; the pivot
// b_k + (gap / 2) d_k is where the direction turns; a_{k+1} = pivot + (gap / 2) d_{k+1}.
class Painter {
 public:
  Painter(const PathfinderOptions& o, Rng& rng) : o_(o), rng_(rng), canvas_(o) {}

  struct Dash {
    std::vector<Ink> ink;  // with the marker discs the dash reserves
    double angle;
    Point from, tip;  // a_k, b_k
  };

  struct Path {
    int32_t id = 0, length = 0;  // length: dashes when complete
    bool target = false;         // target paths reserve marker discs at both ends
    Point origin{};
    std::vector<Dash> dashes;
    bool complete() const { return static_cast<int32_t>(dashes.size()) == length; }
  };

  Canvas& canvas() { return canvas_; }

  // The first dash, from `origin` in direction `angle`.
  bool start(Path& p, Point origin, double angle) {
    const Point b = along(origin, angle, o_.paddle_length);
    ink_.clear();
    if (!canvas_.raster_dash(origin, b, ink_)) return false;
    if (p.target && !reserve_disc(origin)) return false;
    if (p.target && p.length == 1 && !reserve_disc(b)) return false;
    if (!canvas_.fits(ink_, p.id, 0)) return false;
    p.origin = origin;
    push(p, angle, origin, b);
    return true;
  }

  // One more dash. The turn is drawn from its density restricted to the turns whose dash
  // fits (as snakes2 samples only free directions): by rejection for kTurnTries draws, then
  // among a fan of kFan evenly spaced turns, drawn by weight without replacement until one
  // fits (the same distribution as drawing by weight among the fitting ones).
  bool extend(Path& p) {
    for (int32_t t = 0; t < kTurnTries; ++t)
      if (try_dash(p, turn(), true)) return true;
    double sum = 0.0;
    for (size_t i = 0; i < kFan; ++i) {
      const double w = std::cos(0.5 * kPi * fan_turn(i));
      fan_weight_[i] = w * w;
      sum += w * w;
    }
    for (size_t left = 0; left < kFan; ++left) {
      double pick = rng_.uniform() * sum;
      size_t chosen = kFan;
      for (size_t i = 0; i < kFan; ++i) {
        if (fan_weight_[i] == 0.0) continue;
        chosen = i;
        if (pick < fan_weight_[i]) break;
        pick -= fan_weight_[i];
      }
      if (chosen == kFan) return false;
      if (try_dash(p, fan_turn(chosen) * o_.max_turn, true)) return true;
      sum -= fan_weight_[chosen];
      fan_weight_[chosen] = 0.0;
    }
    return false;
  }

  // Removes all but the first `keep` dashes of `p`.
  void truncate(Path& p, int32_t keep) {
    keep = std::max(keep, 0);
    if (keep >= static_cast<int32_t>(p.dashes.size())) return;
    for (const Dash& d : p.dashes) canvas_.erase(d.ink);
    p.dashes.resize(static_cast<size_t>(keep));
    // Redraw the rest: a pixel may have been shared with a removed dash.
    for (int32_t k = 0; k < keep; ++k)
      canvas_.commit(p.dashes[static_cast<size_t>(k)].ink, p.id, k);
  }

  double uniform_angle() { return rng_.uniform(-kPi, kPi); }

 private:
  // Rasterizes the next dash of `p` after turning by `turn`; when it fits and `commit`,
  // draws it. Returns whether it fits.
  bool try_dash(Path& p, double turn, bool commit) {
    const Dash& last = p.dashes.back();
    const double half_gap = 0.5 * o_.paddle_gap, angle = last.angle + turn;
    const double last_dy = last.tip.y - last.from.y, last_dx = last.tip.x - last.from.x;
    const double dy = std::sin(angle), dx = std::cos(angle);
    const double step = half_gap / o_.paddle_length;  // last dash's direction times half_gap
    const Point a{last.tip.y + step * last_dy + half_gap * dy,
                  last.tip.x + step * last_dx + half_gap * dx};
    const Point b{a.y + o_.paddle_length * dy, a.x + o_.paddle_length * dx};
    const auto k = static_cast<int32_t>(p.dashes.size());
    ink_.clear();
    if (!canvas_.raster_dash(a, b, ink_)) return false;
    if (p.target && k + 1 == p.length && !reserve_disc(b)) return false;
    if (!canvas_.fits(ink_, p.id, k)) return false;
    if (commit) push(p, angle, a, b);
    return true;
  }

  void push(Path& p, double angle, Point from, Point tip) {
    canvas_.commit(ink_, p.id, static_cast<int32_t>(p.dashes.size()));
    p.dashes.push_back({ink_, angle, from, tip});
  }

  // The i-th turn of the fan, as a fraction of max_turn in (-1, 1).
  static double fan_turn(size_t i) { return 2.0 * (static_cast<double>(i) + 0.5) / kFan - 1.0; }

  bool reserve_disc(Point c) {
    return canvas_.inside(c, c, o_.marker_radius) &&
           canvas_.raster(c, c, o_.marker_radius, true, ink_);
  }

  // A turn with density proportional to cos^2(pi/2 * d / max_turn) on (-max_turn, max_turn).
  double turn() {
    for (;;) {
      const double u = rng_.uniform(-1.0, 1.0);
      const double w = std::cos(0.5 * kPi * u);
      if (rng_.uniform() < w * w) return u * o_.max_turn;
    }
  }

  const PathfinderOptions& o_;
  Rng& rng_;
  Canvas canvas_;
  std::vector<Ink> ink_;
  std::array<double, kFan> fan_weight_{};
};

uint8_t to_byte(double v) { return static_cast<uint8_t>(std::clamp(std::lround(v), 1L, 255L)); }

}  // namespace

PathfinderOptions pathfinder_options(int32_t resolution) {
  if (resolution < PathfinderOptions::kMinResolution ||
      resolution > PathfinderOptions::kMaxResolution)
    throw std::invalid_argument(
        "pathfinder: `resolution` must be in [" +
        std::to_string(PathfinderOptions::kMinResolution) + ", " +
        std::to_string(PathfinderOptions::kMaxResolution) +
        "] pixels (LRA: 32, 64, 128, 256), got " + std::to_string(resolution));
  PathfinderOptions o;
  o.resolution = resolution;
  auto scaled = [](double v, double s) {
    return std::max<int32_t>(1, static_cast<int32_t>(std::lround(v * s)));
  };
  if (resolution < 96) {  // LRA Pathfinder-32
    const double s = resolution / 32.0;
    o.paddle_length = scaled(2, s);
    o.paddle_gap = scaled(2, s);  // 2 x margin 1
    o.paddle_thickness = std::max(0.5, 0.5 * s);
    o.max_turn = kPi / 2.0;  // continuity 1.0
    o.seed_distance = scaled(7, s);
    o.marker_radius = std::max(1.0, 1.5 * s);
    o.clearance = o.paddle_gap + 0.8 * std::max(1.0, s);
    o.n_distractors = 5;  // 20 // (14 // 3)
    o.contrast = 1.5;     // snake contrast 2 x paddle contrast 0.75
  } else {                // LRA Path-X (128)
    const double s = resolution / 128.0;
    o.paddle_length = scaled(5, s);
    o.paddle_gap = scaled(5, s);  // 2 x margin, margin in {2, 3}
    o.paddle_thickness = 1.5 * s;
    o.max_turn = kPi / (2.0 * 1.8);  // continuity 1.8
    o.seed_distance = scaled(20, s);
    o.marker_radius = 3.0 * s;
    o.clearance = o.paddle_gap + std::max(1.0, s);
    o.n_distractors = 8;  // 35 / (14 / 3) in Python 2
    o.contrast = 0.9;
  }
  o.contour_length = 14;
  o.distractor_length = 14 / 3;
  return o;
}

void validate_pathfinder_export(int32_t resolution, int64_t count, int64_t seed) {
  using std::to_string;
  pathfinder_options(resolution);  // checks the resolution
  if (count < 1 || count > PathfinderExport::kMaxCount)
    throw std::invalid_argument("pathfinder: `count` must be in [1, " +
                                to_string(PathfinderExport::kMaxCount) + "] images, got " +
                                to_string(count));
  if (seed < 0 || seed > PathfinderExport::kMaxSeed)
    throw std::invalid_argument("pathfinder: `seed` must be in [0, " +
                                to_string(PathfinderExport::kMaxSeed) + "], got " +
                                to_string(seed));
  const int64_t pixels = count * resolution * resolution;  // <= 10^5 * 2^16: no overflow
  if (pixels > PathfinderExport::kMaxPixels)
    throw std::invalid_argument(
        "pathfinder: `count` " + to_string(count) + " images of `resolution` " +
        to_string(resolution) + " hold " + to_string(pixels) + " pixels, more than the limit of " +
        to_string(PathfinderExport::kMaxPixels) + "; lower `count` or `resolution`");
}

uint64_t pathfinder_export_seed(int64_t seed, int64_t index) {
  return static_cast<uint64_t>(seed) * 1000003ULL + static_cast<uint64_t>(index);
}

PathfinderImage render_pathfinder_example(const PathfinderOptions& options, uint64_t example_seed,
                                          int32_t label) {
  validate(options);
  if (label != 0 && label != 1)
    throw std::invalid_argument("pathfinder: label must be 0 or 1, got " + std::to_string(label));
  const PathfinderOptions& o = options;
  const int32_t n = o.resolution;
  Rng rng(mix64(example_seed ^ 0x5046494E44455221ULL));  // "PFINDER!"
  Painter painter(o, rng);
  Canvas& canvas = painter.canvas();

  // The two target paths, grown alternately (the shorter first). A dead end removes the
  // path's last kBacktrack dashes; after kBacktracks of those the example starts afresh.
  std::array<Painter::Path, 2> targets;
  bool placed = false;
  const double lo = 2.0 * o.seed_distance, hi = n - 2.0 * o.seed_distance;
  for (int32_t restart = 0; restart < kMaxRestarts && !placed; ++restart) {
    canvas.clear();
    for (int32_t i = 0; i < 2; ++i) {
      targets[static_cast<size_t>(i)] = {};
      targets[static_cast<size_t>(i)].id = i;
      targets[static_cast<size_t>(i)].length = o.contour_length;
      targets[static_cast<size_t>(i)].target = true;
    }
    const Point first{rng.uniform(lo, hi), rng.uniform(lo, hi)};
    if (!painter.start(targets[0], first, painter.uniform_angle())) continue;
    bool ok = false;
    for (int32_t t = 0; t < kSeedTries && !ok; ++t) {
      const Point second = along(first, painter.uniform_angle(), o.seed_distance);
      ok = painter.start(targets[1], second, painter.uniform_angle());
    }
    for (int32_t backtracks = 0; ok && !(targets[0].complete() && targets[1].complete());) {
      Painter::Path& p =
          targets[0].dashes.size() <= targets[1].dashes.size() ? targets[0] : targets[1];
      if (painter.extend(p)) continue;
      const auto size = static_cast<int32_t>(p.dashes.size());
      if (++backtracks > kBacktracks || size < 2) {
        ok = false;
      } else {
        painter.truncate(p, std::max(1, size - kBacktrack));  // the origin stays
      }
    }
    placed = ok;
  }
  if (!placed)
    throw std::runtime_error("pathfinder: no room for the two target paths after " +
                             std::to_string(kMaxRestarts) + " restarts; loosen the options");

  // Distractors, placed anywhere (no backtracking); one that finds no room is dropped.
  for (int32_t d = 0; d < o.n_distractors; ++d) {
    Painter::Path p;
    p.id = 2 + d;
    p.length = o.distractor_length;
    for (int32_t t = 0; t < kDistractorTries; ++t) {
      const Point origin{rng.uniform(kBorder, n - kBorder), rng.uniform(kBorder, n - kBorder)};
      bool ok = painter.start(p, origin, painter.uniform_angle());
      while (ok && !p.complete()) ok = painter.extend(p);
      if (ok) break;
      painter.truncate(p, 0);
    }
  }

  // Markers: A on the origin of one target path, B on the terminal end of the same path
  // (label 1) or of the other (label 0).
  const int32_t a_path = static_cast<int32_t>(rng.next() >> 63);
  const int32_t b_path = label == 1 ? a_path : 1 - a_path;
  const Point a = targets[static_cast<size_t>(a_path)].origin;
  const Point b = targets[static_cast<size_t>(b_path)].dashes.back().tip;

  PathfinderImage image;
  image.resolution = n;
  image.label = label;
  image.pixels.assign(static_cast<size_t>(n) * n, 0);
  const double gain = 255.0 * o.contrast / (kSub * kSub);
  for (size_t j = 0; j < image.pixels.size(); ++j)
    if (canvas.cover(j) > 0) image.pixels[j] = to_byte(gain * canvas.cover(j));
  std::vector<Ink> disc;
  for (const Point& c : {a, b}) {
    disc.clear();
    canvas.raster(c, c, o.marker_radius, true, disc);
    for (const Ink& k : disc) {
      uint8_t& px = image.pixels[static_cast<size_t>(k.index)];
      px = std::max(px, to_byte(255.0 * k.covered / (kSub * kSub)));
    }
  }
  image.marker_a = {static_cast<int32_t>(std::floor(a.y)), static_cast<int32_t>(std::floor(a.x))};
  image.marker_b = {static_cast<int32_t>(std::floor(b.y)), static_cast<int32_t>(std::floor(b.x))};
  return image;
}

LabelledSplits generate_pathfinder(const PathfinderOptions& options) {
  validate(options);
  validate_sizes(options);
  LabelledSplits splits;
  const uint64_t base = mix64(options.seed + kGolden);
  auto fill = [&](std::vector<LabelledSequence>& out, uint64_t split, int64_t count) {
    out.reserve(static_cast<size_t>(count));
    const uint64_t split_key = mix64(base ^ mix64(split + 1));
    for (int64_t i = 0; i < count; ++i) {
      const auto index = static_cast<uint64_t>(i);
      const uint64_t seed = mix64(split_key + mix64(index * 2 + 1));
      const uint64_t pair = mix64(split_key + mix64((index / 2) * 2));
      const auto label = static_cast<int32_t>(((pair >> 63) ^ index) & 1);
      PathfinderImage image = render_pathfinder_example(options, seed, label);
      LabelledSequence s;
      s.tokens.assign(image.pixels.begin(), image.pixels.end());
      s.label = label;
      out.push_back(std::move(s));
    }
  };
  fill(splits.train, 0, options.train);
  fill(splits.valid, 1, options.valid);
  fill(splits.test, 2, options.test);
  return splits;
}

std::string pathfinder_to_pgm(const PathfinderImage& image) {
  const int32_t n = image.resolution;
  if (n <= 0 || image.pixels.size() != static_cast<size_t>(n) * n)
    throw std::invalid_argument("pathfinder_to_pgm: pixels do not match the resolution");
  std::string out = "P5\n" + std::to_string(n) + " " + std::to_string(n) + "\n255\n";
  out.append(reinterpret_cast<const char*>(image.pixels.data()), image.pixels.size());
  return out;
}

}  // namespace seqmix::data
