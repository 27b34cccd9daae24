//===- KvRdkv.h - RDKV: rate-distortion bit widths for cache entries -*- C++ -*-===//
// RDKV gives every prompt entry's key and value its own bit width, from 16
// (fp16) down to 0 (evicted), once after the prompt, by weighted reverse
// water-filling (docs/design.md, "KV-cache policies"; our interpretation of
// the method, /work/shared/methods/kv_policies.md section 5):
//
// * Distortions, per KV head, from the window queries of the group's query
//   heads (rows r = (query head, window query), uniform weight), their
//   attention a_rj over the head's entries and outputs o_r = sum_j a_rj v_j;
//   everything is in output-MSE units per element (/hd). For an entry j at
//   width b, with mse(x, b) the measured per-element error of storing row x
//   at b bits (the codec below):
//     value: D_v(b) = w_v mse(v_j, b),  w_v = mean_r a_rj^2;
//     key:   the logit error of row r is ~N(0, s2), s2 = ||q_r||^2 mse(k_j, b)
//            / hd, and the weight becomes a e^dl, so D_k(b) = mean_r a_rj^2
//            ||v_j - o_r||^2 (e^(2 s2) - 2 e^(s2/2) + 1) / hd. To first order
//            that is w_k mse with w_k = mean_r a_rj^2 ||v_j - o_r||^2
//            ||q_r||^2 / hd^2, the methods note's key weight (a scalar per
//            entry, not per channel); coarse keys cost more, as they should.
//     evicted: removing j moves o_r by a/(1-a) (o_r - v_j) (ReST-KV's exact
//            form, which the note allows): D_0 = mean_r (a/(1-a))^2
//            ||v_j - o_r||^2 / hd.
//   Each of these is smoothed over neighbouring entries with the policy's
//   `pool` kernel (SnapKV's; without it a needle's later tokens, which the
//   window does not attend, go first: passkey at 1k fails even at 50%).
// * Budget: `budget` is the retention in bits relative to fp16: a head's
//   share is budget x prompt entries x 2 x hd x 16 bits (budget_tokens: that
//   many entries at fp16). The window (the last `window` entries) stays at
//   fp16 and is paid from the share; layer_scale multiplies what is left.
//   Bits are what is stored: codes plus each integer row's fp16 scale and
//   fp16 minimum (positions and the width byte are not counted).
// * Allocation over all entries of the LAYER (all KV heads together):
//   reverse water-filling on these measured rate-distortion curves. At a
//   water level theta (distortion per bit) every entry takes the state that
//   minimizes D + theta x bits: evicted, or a key width and a value width
//   from {2, 4, 8, 16}, each at most the row's current width (16 for a fresh
//   entry; a width never grows). theta is bisected so that the layer's bits
//   fit the budget; what is left goes greedily to the step up (one width
//   step of a key or value, or restoring an evicted entry at 2/2 bits) that
//   removes the most distortion per bit, while one fits. For the Gaussian
//   model D = w sigma^2 2^(-2R) with continuous R this choice is exactly the
//   textbook R = max(0, 1/2 log2(w sigma^2 / theta')). We measured that
//   form (continuous rates, rounded to the nearest width, then repaired)
//   first: it put most kept keys at 2 bits, whose real per-token error is
//   several times the model's, and SmolLM2's passkey at 1k failed 2 of 3
//   trials at 5%, 10% and 25% (the same pooling; this form: 2/3, 3/3, 3/3).
//   An entry is kept whole or evicted whole by construction.
//
//===----------------------------------------------------------------------===//
#pragma once
#include <cstdint>
#include <vector>

namespace llmc::kv::rdkv {

/// Supported widths, by code (the nibble stored per row).
constexpr int kWidths[5] = {0, 2, 4, 8, 16};
int widthCode(int width); // throws std::runtime_error on an unsupported width
inline uint8_t packWidths(int keyWidth, int valueWidth) {
  return uint8_t(widthCode(keyWidth) | widthCode(valueWidth) << 4);
}
inline int keyWidth(uint8_t packed) { return kWidths[packed & 15]; }
inline int valueWidth(uint8_t packed) { return kWidths[packed >> 4]; }

/// Bytes of one stored row of hd elements at `width` (0: nothing).
int64_t rowBytes(int width, int64_t hd);
/// Bits charged against the budget for one row (8 x rowBytes).
inline double rowBits(int width, int64_t hd) { return 8.0 * double(rowBytes(width, hd)); }
/// Bytes of an entry (key row + value row).
inline int64_t entryBytes(uint8_t packed, int64_t hd) {
  return rowBytes(keyWidth(packed), hd) + rowBytes(valueWidth(packed), hd);
}

void encodeRow(const float *x, int64_t hd, int width, uint8_t *dst);
void decodeRow(const uint8_t *row, int64_t hd, int width, float *dst);
/// q . x for a stored row; qsum = sum_i q_i (the integer rows' minimum term).
float dotRow(const float *q, float qsum, const uint8_t *row, int64_t hd, int width);
/// acc += w * x for a stored row.
void accumulateRow(const uint8_t *row, int64_t hd, int width, float w, float *acc);

/// Append an entry (key row then value row) to an arena.
void appendEntry(std::vector<uint8_t> &arena, const float *k, const float *v, int64_t hd,
                 uint8_t packed);
/// Byte offset of each entry in an arena with these widths.
std::vector<int64_t> entryOffsets(const std::vector<uint8_t> &widths, int64_t hd);
/// Attention reads of an entry at `entry` (its key row first).
inline float dotKey(const float *q, float qsum, const uint8_t *entry, uint8_t packed, int64_t hd) {
  return dotRow(q, qsum, entry, hd, keyWidth(packed));
}
inline void accumulateValue(const uint8_t *entry, uint8_t packed, int64_t hd, float w, float *acc) {
  accumulateRow(entry + rowBytes(keyWidth(packed), hd), hd, valueWidth(packed), w, acc);
}

/// Modelled output distortion of one entry at each state (see above).
struct EntryCost {
  double key[5] = {}, value[5] = {}; // by width code 1..4 (2, 4, 8, 16 bits)
  double evict = 0;                  // of evicting the entry
};

/// Costs of the first `candidates` entries of one KV head. A is [rows, n]
/// (row r: one window query of one of the group's query heads, softmax over
/// the n entries), qnorm2[r] its ||q_r||^2; k, v are [n, hd].
std::vector<EntryCost> entryCosts(const float *A, const float *qnorm2, int64_t rows, int64_t n,
                                  int64_t candidates, const float *k, const float *v, int64_t hd);

/// Moving average of every cost over `kernel` neighbouring entries (avgPool).
void smoothCosts(std::vector<EntryCost> &cost, int64_t kernel);

/// Widths (from kWidths) for n entries' keys and values.
struct Allocation {
  std::vector<uint8_t> key, value; // widths in bits; 0/0 = evicted
  double bits = 0;                 // sum of rowBits over the kept rows
};
/// The allocation above: water level bisected to the budget, then the
/// leftover filled. cap* are the entries' current widths (>= 2); budgetBits
/// is what they may use in all (Allocation::bits <= budgetBits).
Allocation allocate(const std::vector<EntryCost> &cost, const std::vector<uint8_t> &capKey,
                    const std::vector<uint8_t> &capValue, int64_t hd, double budgetBits);

} // namespace llmc::kv::rdkv
