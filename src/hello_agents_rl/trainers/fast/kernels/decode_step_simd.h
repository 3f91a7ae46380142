// AVX-512 building blocks of decode_step.cpp's kernels: the softmax's exponential, masked tails, the attention's
// cache lookahead, scores and weighted sums over keys stored transposed, and row reductions.
#pragma once
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <cmath>
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

namespace {

constexpr int64_t LANES = 16;

// e^x for x <= 0 (softmax arguments, max subtracted): Cody-Waite range reduction and Cephes' degree-6 polynomial,
// ~1 ulp; exactly 0 below -87 (a masked pad's -inf among them, as torch's softmax gives)
inline __m512 exp_nonpositive(__m512 x) {
  const __mmask16 kept = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_mov_ps(kept, _mm512_scalef_ps(p, n));  // p * 2^n
}

inline __mmask16 first(int64_t count) {  // the first `count` lanes (none, some or all)
  return count >= LANES ? 0xFFFF : count <= 0 ? 0 : static_cast<__mmask16>((1u << count) - 1);
}

// The next head's caches, sent for into L2 a few lines at a time from inside the current head's loops: a burst of
// prefetches at the head's start stalls on the core's few outstanding misses just as demand loads do, while a
// trickle keeps them busy under the current head's arithmetic (a head's caches are ~80-340 KB at 4x4-8x8)
class Lookahead {
 public:
  void clear() { regions_.clear(), region_ = row_ = offset_ = 0; }
  // `rows` runs of `floats` floats, `stride` floats apart
  void add(const float* base, int64_t rows, int64_t stride, int64_t floats) {
    if (rows > 0 && floats > 0) regions_.push_back({reinterpret_cast<const char*>(base), rows, stride * 4, floats * 4});
  }
  inline void step() {
    for (int line = 0; line < LINES_PER_STEP && region_ < regions_.size(); ++line) {
      const Region& at = regions_[region_];
      _mm_prefetch(at.base + row_ * at.stride + offset_, _MM_HINT_T1);
      if ((offset_ += 64) >= at.bytes) {
        offset_ = 0;
        if (++row_ == at.rows) row_ = 0, ++region_;
      }
    }
  }

 private:
  static constexpr int LINES_PER_STEP = 2;  // a step is ~16 FMAs: 2 lines keep ~16 misses in flight per core
  struct Region {
    const char* base;
    int64_t rows, stride, bytes;
  };
  std::vector<Region> regions_;
  size_t region_ = 0;
  int64_t row_ = 0, offset_ = 0;
};

// Keys stored transposed, 16 adjacent keys' element e at kt + (t / 16) * block + e * row for keys t..t+15: the
// prompt's [D][P] (row P, block 16) or a row's own blocks [blocks][D][16] (row 16, block 16 D)
struct KeysT {
  const float* kt;
  int64_t row, block;
  const float* at(int64_t t) const { return kt + (t / LANES) * block; }  // keys t..t+15 (t a multiple of 16)
};

// s[x][t] = bias[x][t] + q[x] . k[t] for XB queries q [XB][D] and `count` keys stored transposed (keys adjacent:
// 32 of them per pass, a register each per query, no horizontal sum); bias nullptr: none
template <int XB>
void scores_block(const float* __restrict q, int64_t d, KeysT keys, int64_t count, float* __restrict s, int64_t lds,
                  const float* __restrict bias, int64_t ldb, Lookahead& ahead) {
  for (int64_t t = 0; t < count; t += 2 * LANES) {
    const __mmask16 m0 = first(count - t), m1 = first(count - t - LANES);
    const float *k0s = keys.at(t), *k1s = k0s + keys.block;  // k1s unread (masked) past the last key
    __m512 acc0[XB], acc1[XB];
#pragma GCC unroll 8
    for (int x = 0; x < XB; ++x) acc0[x] = acc1[x] = _mm512_setzero_ps();
    for (int64_t e = 0; e < d; ++e) {
      ahead.step();
      const __m512 k0 = _mm512_maskz_loadu_ps(m0, k0s + e * keys.row);
      const __m512 k1 = _mm512_maskz_loadu_ps(m1, k1s + e * keys.row);
#pragma GCC unroll 8
      for (int x = 0; x < XB; ++x) {
        const __m512 qx = _mm512_set1_ps(q[x * d + e]);
        acc0[x] = _mm512_fmadd_ps(qx, k0, acc0[x]);
        acc1[x] = _mm512_fmadd_ps(qx, k1, acc1[x]);
      }
    }
#pragma GCC unroll 8
    for (int x = 0; x < XB; ++x) {
      float* row = s + x * lds + t;
      if (bias) {
        acc0[x] = _mm512_add_ps(acc0[x], _mm512_maskz_loadu_ps(m0, bias + x * ldb + t));
        acc1[x] = _mm512_add_ps(acc1[x], _mm512_maskz_loadu_ps(m1, bias + x * ldb + t + LANES));
      }
      _mm512_mask_storeu_ps(row, m0, acc0[x]);
      _mm512_mask_storeu_ps(row + LANES, m1, acc1[x]);
    }
  }
}

constexpr int SCORE_QUERIES = 8;  // queries per scores_block: 16 accumulators and 2 keys' registers
using ScoresFn = void (*)(const float*, int64_t, KeysT, int64_t, float*, int64_t, const float*, int64_t, Lookahead&);
constexpr ScoresFn SCORES[SCORE_QUERIES + 1] = {nullptr,          scores_block<1>, scores_block<2>,
                                                scores_block<3>, scores_block<4>, scores_block<5>,
                                                scores_block<6>, scores_block<7>, scores_block<8>};

// the scores of `queries` queries (rows d apart), in blocks of up to 8
inline void scores(const float* q, int64_t queries, int64_t d, KeysT keys, int64_t count, float* s, int64_t lds,
                   const float* bias, int64_t ldb, Lookahead& ahead) {
  for (int64_t x = 0; x < queries; x += SCORE_QUERIES) {
    const auto xb = std::min<int64_t>(SCORE_QUERIES, queries - x);
    SCORES[xb](q + x * d, d, keys, count, s + x * lds, lds, bias ? bias + x * ldb : nullptr, ldb, ahead);
  }
}

// acc[x][0:16C] += sum_t w[x][t] v[t][0:16C] for XB queries' weights w (rows ldw apart) over `count` values v
// (rows ldv apart): the accumulators stay in registers across the values
template <int C, int XB>
inline void weighted_sum(__m512 (&acc)[XB][C], const float* __restrict w, int64_t ldw, const float* __restrict v,
                         int64_t ldv, int64_t count, Lookahead& ahead) {
  for (int64_t t = 0; t < count; ++t) {
    ahead.step();
    __m512 value[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) value[c] = _mm512_loadu_ps(v + t * ldv + c * LANES);
#pragma GCC unroll 8
    for (int x = 0; x < XB; ++x) {
      const __m512 wx = _mm512_set1_ps(w[x * ldw + t]);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[x][c] = _mm512_fmadd_ps(wx, value[c], acc[x][c]);
    }
  }
}

// out[x][0:16C] = (sum_p w[x][p] pv[p] + sum_t w[x][P + t] ov[t]) * inv[x] for XB queries of one row: the prompt's
// values (shared by the group) and the row's own
template <int C, int XB>
void values_block(const float* w, int64_t ldw, const float* pv, int64_t prompt, const float* ov, int64_t ldov,
                  int64_t own, int64_t d, const float* inv, float* out, int64_t ldo, Lookahead& ahead) {
  __m512 acc[XB][C];
#pragma GCC unroll 8
  for (int x = 0; x < XB; ++x)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) acc[x][c] = _mm512_setzero_ps();
  weighted_sum<C, XB>(acc, w, ldw, pv, d, prompt, ahead);
  weighted_sum<C, XB>(acc, w + prompt, ldw, ov, ldov, own, ahead);
#pragma GCC unroll 8
  for (int x = 0; x < XB; ++x)
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c)
      _mm512_storeu_ps(out + x * ldo + c * LANES, _mm512_mul_ps(acc[x][c], _mm512_set1_ps(inv[x])));
}

constexpr int VALUE_QUERIES = 6;  // queries per values_block: 24 accumulators at 64 floats of a head
using ValuesFn = void (*)(const float*, int64_t, const float*, int64_t, const float*, int64_t, int64_t, int64_t,
                          const float*, float*, int64_t, Lookahead&);
template <int C, int... X>
constexpr std::array<ValuesFn, VALUE_QUERIES + 1> values_row(std::integer_sequence<int, X...>) {
  return {nullptr, values_block<C, X + 1>...};
}
constexpr std::array<std::array<ValuesFn, VALUE_QUERIES + 1>, 5> VALUES = {
    std::array<ValuesFn, VALUE_QUERIES + 1>{}, values_row<1>(std::make_integer_sequence<int, VALUE_QUERIES>{}),
    values_row<2>(std::make_integer_sequence<int, VALUE_QUERIES>{}),
    values_row<3>(std::make_integer_sequence<int, VALUE_QUERIES>{}),
    values_row<4>(std::make_integer_sequence<int, VALUE_QUERIES>{})};

// s[0..len) <- exp(s - max), returns the sum (the tail beyond a multiple of 16 masked)
inline float exp_and_sum(float* s, int64_t len, float max) {
  const __m512 m = _mm512_set1_ps(max);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < len; i += LANES) {
    const __mmask16 k = first(len - i);
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), m));
    _mm512_mask_storeu_ps(s + i, k, e);
    sum = _mm512_mask_add_ps(sum, k, sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

// y = x / sqrt(squares / width + eps) * w over one row, given the sum of its squares: RMSNorm's scaling
inline void rms_scale(const float* x, const float* w, float* y, int64_t width, float squares, double eps) {
  const float inv = 1.0f / std::sqrt(squares / static_cast<float>(width) + static_cast<float>(eps));
  for (int64_t e = 0; e < width; ++e) y[e] = x[e] * inv * w[e];
}

inline float row_max(const float* s, int64_t len) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < len; i += LANES) {
    const __mmask16 k = first(len - i);
    m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, s + i));
  }
  return _mm512_reduce_max_ps(m);
}

}  // namespace
