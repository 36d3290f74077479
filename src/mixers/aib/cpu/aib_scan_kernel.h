#pragma once
// Fused AIB attention scan kernels (forward and backward) on plain pointers.
//
// Legend: B batch, L sequence length, D channels, K levels used = ceil(log2 L) (0 if L == 1).
// Layout: a, v, o, grad_* are [B, L, D] contiguous; lw is [Kp, D] contiguous with Kp >= K
// (log W: level j multiplies distance 2^j by exp(lw[j])); mask is [B, L] (1 = valid) or null.
//
// Method (see include/seqmix/ops/aib_scan.h for the contract):
// * Work items are (batch, up to aib_group_blocks() adjacent channel blocks of kLanes
//   channels); threads take items. Each block of the bidirectional form's suffix half is
//   scanned in reverse, so every block is a causal problem. The fast path reads rows straight
//   from the tensors (software-prefetched a tile ahead) and writes results with streaming
//   stores; the blocks of an item run in lock step, so each row's adjacent lines are fetched
//   together.
// * Fast path: plain floating point with E = exp(A - c), c per tile of positions: the running
//   max of A plus a shift for large weights of the levels inside a tile (the rescale between
//   tiles is folded into the level weights). The levels longer than a tile combine whole
//   rows, so each row carries one power-of-two exponent per level (exact integer
//   arithmetic), moved when an upper bound on the row's sums would pass 2^kRowBits: the
//   distance weights' product can take any value without overflow. Results are checked
//   where they are final (live U in [2^kTinyExp, max], finite outputs or gradients), and a
//   row factor may not flush a row that could still carry a normal number; a block that
//   fails (A spanning ~70 nats inside a tile, one level's weight beyond about e^+-50 next
//   to a much smaller row, |V| >= 2^64 in float, NaN or infinity) reruns on the exponent
//   path, from a staged dense copy.
// * Exponent path (fallback, always exact): every running sum is a mantissa pair (h = E V,
//   u = E) with one shared power-of-two exponent per position and channel; adding two terms
//   rescales the smaller by 2^-(gap) with exponent arithmetic, so neither exp(A) nor products
//   of large distance weights can overflow, and negligible terms flush to zero. O = h / u:
//   the shared exponent cancels. Short shifts run tile by tile in L1.
// * Backward recomputes the forward levels, then runs the transposed scan on the output
//   adjoints, accumulating d lw per level in double precision. The exponent path keeps the
//   K + 1 level snapshots of one block (O(L K kLanes) scratch per thread); the fast path keeps
//   the state after the short-shift levels and each tile's carries, and recomputes a tile's
//   short-shift snapshots when its turn comes (O(L kLanes) per block).
#include <cstdint>

namespace seqmix::ops::cpu {

template <typename T>
struct AIBScanParams {
  const T* a = nullptr;           // [B, L, D]
  const T* v = nullptr;           // [B, L, D]
  const T* lw = nullptr;          // [Kp, D] log distance weights
  const uint8_t* mask = nullptr;  // [B, L] or null
  T* o = nullptr;                 // [B, L, D] output
  // Backward only:
  const T* grad_o = nullptr;  // [B, L, D]
  T* grad_a = nullptr;        // [B, L, D]
  T* grad_v = nullptr;        // [B, L, D]
  double* grad_lw = nullptr;  // [B, K, D] per-sequence partial sums (caller reduces over B)
  int64_t B = 0, L = 0, D = 0, K = 0;
  bool bidirectional = false;  // channels [D/2, D) run the suffix form
  // Mixed precision (T = float only): a tensor given here, as the raw bits of bfloat16
  // [B, L, D], replaces its float pointer above. Its values are widened as they are read and
  // rounded to nearest even once as they are written; the arithmetic stays float.
  struct {
    const uint16_t *a = nullptr, *v = nullptr, *grad_o = nullptr;
    uint16_t *o = nullptr, *grad_a = nullptr, *grad_v = nullptr;
  } bf16;
};

/// Number of channels per work item for scalar type T (one 64-byte vector).
template <typename T>
constexpr int64_t aib_lanes() {
  return 64 / static_cast<int64_t>(sizeof(T));
}

/// Positions in each of the two halo regions the forward's L1 tiles use (exponent path).
constexpr int64_t aib_halo_positions() { return 256; }

/// Shape of the fast path's two phases for one block (see aib_scan_kernel_impl.h): the
/// sequence, padded to R tiles of T = 2^m positions, runs the levels with shifts below T tile
/// by tile, then the others as scans down the columns of the [R][T] grid, C columns at a time.
struct AIBFastLayout {
  int64_t m, T, R, Lp, nh, C;
  bool backward;
  // Offsets in vectors (one vector = one position of one channel block) into block scratch:
  // state [2][Lp], carries, column chunk, backward tile area and adjoint carries, the tile
  // scales [R], the tiles' smallest E (log2, or a floor where a position is padded) [R], the
  // rows' power-of-two exponents [R] while the column factors are formed, and the column
  // levels' per-row factors [nh][R] for the row itself (rowa) and the row it absorbs (rowb).
  int64_t state, carry, chunk, tile, rcarry, scales, rowmin, rowe, rowa, rowb, total;
};

/// Positions per tile are 2^kAIBFastTileBits (at most).
constexpr int64_t kAIBFastTileBits = 7;

inline AIBFastLayout aib_fast_layout(int64_t L, int64_t K, bool backward) {
  AIBFastLayout f{};
  f.backward = backward;
  f.m = K < kAIBFastTileBits ? K : kAIBFastTileBits;
  f.T = int64_t{1} << f.m;
  f.R = (L + f.T - 1) / f.T;
  f.Lp = f.R * f.T;
  f.nh = K - f.m;
  // A chunk holds, per column, R positions of h and u (backward: nh + 1 level snapshots and
  // the adjoints); sized to stay near L1 (forward) or well inside L2 (backward).
  const int64_t per_col = 2 * f.R * (backward ? f.nh + 2 : 1);
  const int64_t budget = backward ? 1024 : 512;
  f.C = budget / per_col;
  f.C = f.C < 1 ? 1 : (f.C > f.T ? f.T : f.C);
  const int64_t slots = backward ? f.R : 2;  // backward keeps every tile's carries
  f.state = 0;
  f.carry = f.state + 2 * f.Lp;
  f.chunk = f.carry + 2 * slots * f.T;
  f.tile = f.chunk + per_col * f.C;
  f.rcarry = f.tile + (backward ? 2 * (f.m + 1) * f.T : 0);
  f.scales = f.rcarry + (backward ? 4 * f.T : 0);
  f.rowmin = f.scales + f.R;
  f.rowe = f.rowmin + f.R;
  f.rowa = f.rowe + f.R;
  f.rowb = f.rowa + f.nh * f.R;
  f.total = f.rowb + f.nh * f.R;
  return f;
}

/// Channel blocks per work item: adjacent blocks are adjacent cache lines of each row, read
/// together (see aib_scan_kernel_impl.h).
constexpr int64_t aib_group_blocks() { return 2; }

/// Number of (batch, channel group) work items.
int64_t aib_work_items(int64_t B, int64_t D, bool bidirectional, int64_t lanes);

/// Scratch bytes the per-block part of one work item needs.
int64_t aib_block_scratch_bytes(int64_t L, int64_t K, int64_t lanes, int64_t elem_size,
                                bool backward);

/// Scratch bytes one thread needs: forward only or forward + backward (block scratch plus the
/// staging area the exponent path uses).
int64_t aib_scratch_bytes(int64_t L, int64_t K, int64_t lanes, int64_t elem_size, bool backward);

/// Runs work items [begin, end) of the forward pass, using `scratch` (aib_scratch_bytes).
template <typename T>
void aib_scan_forward(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch);

/// Runs work items [begin, end) of the backward pass (writes grad_a, grad_v, grad_lw).
template <typename T>
void aib_scan_backward(const AIBScanParams<T>& p, int64_t begin, int64_t end, void* scratch);

/// Testing/benchmarking aid: with `exact` set, every block takes the exponent path, never the
/// plain-float fast path (process-wide; off by default).
void aib_force_exact_path(bool exact);
bool aib_exact_path_forced();

/// Number of blocks (one channel block of one sequence, one pass) whose fast-path attempt
/// was abandoned for the exponent path since the program started. Tests use it to prove that
/// well-scaled inputs really exercise the fast path.
int64_t aib_fast_path_fallbacks();
void aib_count_fallback();

}  // namespace seqmix::ops::cpu
