// A decode step's small operations, each one pass instead of several torch operations (why by hand: at a decode
// step's 16 rows each torch operation costs tens of microseconds of dispatch and passes over data the weight stream
// has just evicted from cache; 30 layers x ~15 of them are a fifth of the step):
// * decode_attention: attention.py's grouped_attention (each group's prompt keys and values read once for its rows);
// * rms_norm: F.rms_norm with a weight over the last dimension;
// * rope: decoder.py's apply_rope, x * cos + roll(x, D/2) * signed_sin;
// * sample_rows: sampler.draw of softmax(logits / temperature), in one pass;
// * silu_mul, add_rms_norm_: a decode layer's operations between its projections (decoder.py's fused_decode_layer
//   path): SwiGLU's silu(gate) * up, and each residual add with the norm after it;
// * DecodeLayers: the decode step's loop over the layers (native_decode_loop), on the kernels above and the streamed
//   GEMM (streamed_gemm.h).
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include "streamed_gemm.h"
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

// q [B, Hq, 1, D] (B = G * n, a group's rows adjacent; any row and head strides, D contiguous); the prompt's keys
// stored transposed [G, Hkv, D, P] and its values [G, Hkv, P, D]; prefix_bias [G * Hkv, n * r, P] (0 or -inf);
// each row's own keys in blocks of 16 slots [G, Hkv, n, blocks, D, 16] (slot t at block t / 16, lane t % 16) and
// values [G, Hkv, n, T, D] (T valid slots, blocks * 16 >= T, any slot stride) -> [B, Hq, 1, D]. With new_k and new_v
// [B, Hkv, 1, D] (this step's key and value, D contiguous), they are written to the own caches' slot T - 1 first,
// each head's by its own thread just before it reads them (a key's lane of its block is D lines: written apart,
// each line is fetched twice)
torch::Tensor decode_attention(const torch::Tensor& q, const torch::Tensor& pk_in, const torch::Tensor& pv_in,
                               const torch::Tensor& bias_in, torch::Tensor& ok, torch::Tensor& ov, int64_t n,
                               double scale, const c10::optional<torch::Tensor>& new_k,
                               const c10::optional<torch::Tensor>& new_v) {
  const auto B = q.size(0), Hq = q.size(1), D = q.size(3);
  const auto G = pk_in.size(0), Hkv = pk_in.size(1), P = pk_in.size(3), T = ov.size(3);
  const auto r = Hq / Hkv;
  const bool store = new_k.has_value() && new_k->defined();
  TORCH_CHECK(D % LANES == 0 && B == G * n && Hq == Hkv * r && q.dim() == 4 && q.size(2) == 1 && q.stride(3) == 1 &&
                  pk_in.dim() == 4 && pk_in.size(2) == D && pv_in.dim() == 4 && pv_in.size(0) == G &&
                  pv_in.size(1) == Hkv && pv_in.size(2) == P && pv_in.size(3) == D && bias_in.dim() == 3 &&
                  bias_in.size(0) == G * Hkv && bias_in.size(1) == n * r && bias_in.size(2) == P && ok.dim() == 6 &&
                  ok.size(0) == G && ok.size(1) == Hkv && ok.size(2) == n && ok.size(3) * LANES >= T &&
                  ok.size(4) == D && ok.size(5) == LANES && ok.stride(5) == 1 && ok.stride(4) == LANES &&
                  ok.stride(3) >= D * LANES && ov.dim() == 5 && ov.size(0) == G && ov.size(1) == Hkv &&
                  ov.size(2) == n && ov.size(4) == D && ov.stride(4) == 1 && q.scalar_type() == torch::kFloat &&
                  ok.scalar_type() == torch::kFloat && ov.scalar_type() == torch::kFloat,
              "decode_attention: fp32, head_dim a multiple of 16, B = groups * n, q [B, Hq, 1, D], own keys "
              "[.., blocks, D, 16] (blocks * 16 >= T, each block contiguous) and values [.., T, D] contiguous in D");
  TORCH_CHECK(!store || (new_v.has_value() && new_v->defined() && T > 0 && new_k->dim() == 4 && new_v->dim() == 4 &&
                         new_k->size(0) == B && new_k->size(1) == Hkv && new_k->size(2) == 1 &&
                         new_k->size(3) == D && new_k->stride(3) == 1 && new_v->size(0) == B &&
                         new_v->size(1) == Hkv && new_v->size(2) == 1 && new_v->size(3) == D &&
                         new_v->stride(3) == 1 && new_k->scalar_type() == torch::kFloat &&
                         new_v->scalar_type() == torch::kFloat),
              "decode_attention: new_k and new_v fp32 [B, Hkv, 1, D], D contiguous, and a slot to write them to");
  const auto pk = pk_in.contiguous(), pv = pv_in.contiguous(), bias = bias_in.contiguous();
  auto out = torch::empty({B, Hq, 1, D}, q.options());
  const float *Q = q.data_ptr<float>(), *PK = pk.data_ptr<float>(), *PV = pv.data_ptr<float>();
  const float* BIAS = bias.data_ptr<float>();
  float *OK = ok.data_ptr<float>(), *OV = ov.data_ptr<float>();
  const auto ks = ok.strides(), vs = ov.strides(), qs_ = q.strides();
  const float* NK = store ? new_k->data_ptr<float>() : nullptr;
  const float* NV = store ? new_v->data_ptr<float>() : nullptr;
  const auto nks = store ? new_k->strides() : q.strides(), nvs = store ? new_v->strides() : q.strides();
  float* O = out.data_ptr<float>();
  const auto rows = n * r;  // a key head's queries in a group: row i's r queries at i * r
  const auto width = P + T;  // a query's scores: the prompt's, then its own
  at::parallel_for(0, G * Hkv, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> qs(rows * D), sc(rows * width), inv(rows);
    Lookahead ahead;
    for (int64_t gh = lo; gh < hi; ++gh) {
      const int64_t g = gh / Hkv, kh = gh % Hkv;
      ahead.clear();
      if (gh + 1 < hi) {  // the next head's prompt and own caches, fetched under this one's arithmetic
        const int64_t g1 = (gh + 1) / Hkv, kh1 = (gh + 1) % Hkv;
        ahead.add(PK + (gh + 1) * D * P, 1, 0, D * P);
        ahead.add(PV + (gh + 1) * P * D, 1, 0, P * D);
        for (int64_t i = 0; i < n; ++i) {
          ahead.add(OK + g1 * ks[0] + kh1 * ks[1] + i * ks[2], (T + LANES - 1) / LANES, ks[3], D * LANES);
          ahead.add(OV + g1 * vs[0] + kh1 * vs[1] + i * vs[2], 1, 0, T * vs[3]);
        }
      }
      for (int64_t i = 0; store && i < n; ++i) {  // this step's key and value into slot T - 1 of row i's caches
        const float *key = NK + (g * n + i) * nks[0] + kh * nks[1], *value = NV + (g * n + i) * nvs[0] + kh * nvs[1];
        float* lane = OK + g * ks[0] + kh * ks[1] + i * ks[2] + (T - 1) / LANES * ks[3] + (T - 1) % LANES;
        for (int64_t e = 0; e < D; ++e) lane[e * LANES] = key[e];
        std::copy(value, value + D, OV + g * vs[0] + kh * vs[1] + i * vs[2] + (T - 1) * vs[3]);
      }
      for (int64_t i = 0; i < n; ++i)  // the queries, scaled: row i, head j at qs[(i * r + j) * D]
        for (int64_t j = 0; j < r; ++j) {
          const float* src = Q + (g * n + i) * qs_[0] + (kh * r + j) * qs_[1];
          for (int64_t e = 0; e < D; ++e) qs[(i * r + j) * D + e] = src[e] * static_cast<float>(scale);
        }
      // the prompt's keys, each read once for all the group's queries; then each row's own keys
      scores(qs.data(), rows, D, KeysT{PK + gh * D * P, P, LANES}, P, sc.data(), width, BIAS + gh * rows * P, P,
             ahead);
      for (int64_t i = 0; i < n; ++i)
        scores(qs.data() + i * r * D, r, D, KeysT{OK + g * ks[0] + kh * ks[1] + i * ks[2], LANES, ks[3]}, T,
               sc.data() + i * r * width + P, width, nullptr, 0, ahead);
      for (int64_t x = 0; x < rows; ++x) {
        float* s = sc.data() + x * width;
        inv[x] = 1.0f / exp_and_sum(s, width, row_max(s, width));
      }
      for (int64_t i = 0; i < n; ++i) {  // row i's queries in blocks of up to 6, 64 floats of the head at a time
        const float* own = OV + g * vs[0] + kh * vs[1] + i * vs[2];
        for (int64_t j = 0; j < r; j += VALUE_QUERIES) {
          const auto xb = std::min<int64_t>(VALUE_QUERIES, r - j);
          const auto x = i * r + j;
          for (int64_t e = 0; e < D; e += 4 * LANES) {
            const auto chunks = std::min<int64_t>(4, (D - e) / LANES);
            VALUES[chunks][xb](sc.data() + x * width, width, PV + gh * P * D + e, P, own + e, vs[3], T, D,
                               inv.data() + x, O + ((g * n + i) * Hq + kh * r + j) * D + e, D, ahead);
          }
        }
      }
    }
  });
  return out;
}

// x [..., H] (rows contiguous in H) -> x / sqrt(mean(x^2) + eps) * weight [H]
torch::Tensor rms_norm(const torch::Tensor& x_in, const torch::Tensor& weight_in, double eps) {
  const auto h = x_in.size(-1);
  TORCH_CHECK(x_in.scalar_type() == torch::kFloat && weight_in.dim() == 1 && weight_in.size(0) == h,
              "rms_norm: fp32 x [..., H] and weight [H]");
  const auto x = x_in.contiguous(), weight = weight_in.contiguous();
  auto out = torch::empty_like(x);
  const auto rows = x.numel() / h;
  const float *X = x.data_ptr<float>(), *W = weight.data_ptr<float>();
  float* Y = out.data_ptr<float>();
  for (int64_t row = 0; row < rows; ++row) {  // a decode step's few rows: one thread, no parallel region
    const float* xr = X + row * h;
    float* yr = Y + row * h;
    __m512 squares = _mm512_setzero_ps();
    int64_t e = 0;
    for (; e + LANES <= h; e += LANES) {
      const __m512 v = _mm512_loadu_ps(xr + e);
      squares = _mm512_fmadd_ps(v, v, squares);
    }
    float sum = _mm512_reduce_add_ps(squares);
    for (; e < h; ++e) sum += xr[e] * xr[e];
    rms_scale(xr, W, yr, h, sum, eps);
  }
  return out;
}

// x [B, S, H, D] (D contiguous, heads adjacent), cos and signed sin [B, S, 1, D] -> x * cos + roll(x, D/2) * sin
torch::Tensor rope(const torch::Tensor& x, const torch::Tensor& cos_in, const torch::Tensor& sin_in) {
  const auto B = x.size(0), S = x.size(1), H = x.size(2), D = x.size(3), half = D / 2;
  TORCH_CHECK(x.scalar_type() == torch::kFloat && x.stride(3) == 1 && x.stride(2) == D && D % 2 == 0 &&
                  cos_in.numel() == B * S * D && sin_in.numel() == B * S * D,
              "rope: fp32 x [B, S, H, D] with heads adjacent, cos and sin [B, S, 1, D]");
  const auto cos = cos_in.contiguous(), sin = sin_in.contiguous();
  auto out = torch::empty({B, S, H, D}, x.options());
  const float *X = x.data_ptr<float>(), *C = cos.data_ptr<float>(), *N = sin.data_ptr<float>();
  float* Y = out.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      const float *c = C + (b * S + s) * D, *n = N + (b * S + s) * D;
      for (int64_t h = 0; h < H; ++h) {
        const float* xr = X + b * x.stride(0) + s * x.stride(1) + h * D;
        float* yr = Y + ((b * S + s) * H + h) * D;
        for (int64_t e = 0; e < half; ++e) yr[e] = xr[e] * c[e] + xr[e + half] * n[e];
        for (int64_t e = half; e < D; ++e) yr[e] = xr[e] * c[e] + xr[e - half] * n[e];
      }
    }
  return out;
}

// One token per row of logits [B, V] from softmax(logits / temperature), by the sampler's two-level inverse CDF
// (sampler.draw) on one uniform per row u [B] (float64): the unnormalised weights exp((l - max) / T) and their
// blocks' sums in one pass, the block holding u * total found, then the entry within it, both in float64. The same
// distribution as softmax then draw, the same uniforms (tokens differ only where rounding moves a boundary);
// why by hand: the division, softmax and draw are ~8 passes over [B, V] (1.3 ms a 4x4 step, 4.2 at 8x8)
torch::Tensor sample_rows(const torch::Tensor& logits_in, double temperature, const torch::Tensor& uniforms_in,
                          int64_t block) {
  TORCH_CHECK(logits_in.dim() == 2 && logits_in.scalar_type() == torch::kFloat && temperature > 0 && block > 0 &&
                  block % LANES == 0 && uniforms_in.scalar_type() == torch::kDouble &&
                  uniforms_in.numel() == logits_in.size(0),
              "sample_rows: fp32 logits [B, V], temperature > 0, float64 uniforms [B], a block of a multiple of 16");
  const auto logits = logits_in.contiguous(), uniforms = uniforms_in.contiguous();
  const auto rows = logits.size(0), vocab = logits.size(1), blocks = (vocab + block - 1) / block;
  auto tokens = torch::empty({rows}, logits.options().dtype(torch::kLong));
  const float* L = logits.data_ptr<float>();
  const double* U = uniforms.data_ptr<double>();
  int64_t* out = tokens.data_ptr<int64_t>();
  at::parallel_for(0, rows, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> weights(vocab);
    std::vector<double> cumulative(blocks);
    for (int64_t row = lo; row < hi; ++row) {
      const float* l = L + row * vocab;
      const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / temperature));
      const __m512 top = _mm512_set1_ps(row_max(l, vocab) / static_cast<float>(temperature));
      double total = 0.0;
      for (int64_t b = 0; b < blocks; ++b) {  // exp((l - max) / T) = exp(l / T - max / T) <= 1, and each block's sum
        const auto end = std::min(vocab, (b + 1) * block);
        __m512d lower = _mm512_setzero_pd(), upper = _mm512_setzero_pd();
        for (int64_t i = b * block; i < end; i += LANES) {
          const __mmask16 m = first(end - i);
          const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, l + i), inv), top));
          _mm512_mask_storeu_ps(weights.data() + i, m, e);
          const __m512 kept = _mm512_maskz_mov_ps(m, e);
          lower = _mm512_add_pd(lower, _mm512_cvtps_pd(_mm512_castps512_ps256(kept)));
          upper = _mm512_add_pd(upper, _mm512_cvtps_pd(_mm512_extractf32x8_ps(kept, 1)));
        }
        total += _mm512_reduce_add_pd(_mm512_add_pd(lower, upper));
        cumulative[b] = total;
      }
      // the target strictly below the total, so that the entry found has a non-zero weight
      const double target = std::min(U[row] * total, std::nextafter(total, 0.0));
      const auto b = std::min<int64_t>(
          blocks - 1, std::upper_bound(cumulative.begin(), cumulative.end(), target) - cumulative.begin());
      double rest = target - (b > 0 ? cumulative[b - 1] : 0.0), within = 0.0;
      const auto start = b * block, end = std::min(vocab, (b + 1) * block);
      int64_t token = end - 1;
      for (int64_t i = start; i < end; ++i) {  // the first entry whose running sum passes the remainder
        within += weights[i];
        if (within > rest) {
          token = i;
          break;
        }
      }
      while (weights[token] == 0.0f && token > start) --token;  // rounding at the block's end: its last live entry
      out[row] = token;
    }
  });
  return tokens;
}

// gate_up [M, 2I] (gate then up, rows contiguous) -> silu(gate) * up [M, I], silu(x) = x / (1 + e^-x) taken as
// x / (1 + e) for x >= 0 and x e / (1 + e) below, e = e^-|x| <= 1 (no overflow either side)
torch::Tensor silu_mul(const torch::Tensor& gate_up_in) {
  TORCH_CHECK(gate_up_in.dim() == 2 && gate_up_in.scalar_type() == torch::kFloat && gate_up_in.size(1) % 2 == 0,
              "silu_mul: fp32 gate_up [M, 2I]");
  const auto gate_up = gate_up_in.contiguous();
  const auto rows = gate_up.size(0), width = gate_up.size(1) / 2;
  auto out = torch::empty({rows, width}, gate_up.options());
  const float* X = gate_up.data_ptr<float>();
  float* Y = out.data_ptr<float>();
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (int64_t row = 0; row < rows; ++row) {
    const float *gate = X + row * 2 * width, *up = gate + width;
    float* y = Y + row * width;
    for (int64_t e = 0; e < width; e += LANES) {
      const __mmask16 m = first(width - e);
      const __m512 x = _mm512_maskz_loadu_ps(m, gate + e);
      const __mmask16 negative = _mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ);
      const __m512 t = exp_nonpositive(_mm512_sub_ps(zero, _mm512_abs_ps(x)));
      const __m512 silu = _mm512_div_ps(_mm512_mask_mul_ps(x, negative, x, t), _mm512_add_ps(one, t));
      _mm512_mask_storeu_ps(y + e, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, up + e)));
    }
  }
  return out;
}

// h [..., H] += y (in place: the residual stream), and rms_norm(h, weight, eps) of the sum, in one pass
torch::Tensor add_rms_norm_(torch::Tensor& h, const torch::Tensor& y_in, const torch::Tensor& weight_in, double eps) {
  const auto width = h.size(-1);
  TORCH_CHECK(h.scalar_type() == torch::kFloat && h.is_contiguous() && y_in.numel() == h.numel() &&
                  y_in.size(-1) == width && y_in.scalar_type() == torch::kFloat && weight_in.dim() == 1 &&
                  weight_in.size(0) == width,
              "add_rms_norm_: fp32 h [..., H] contiguous, y of its shape, weight [H]");
  const auto y = y_in.contiguous(), weight = weight_in.contiguous();
  auto out = torch::empty_like(h);
  const auto rows = h.numel() / width;
  float *Hs = h.data_ptr<float>(), *O = out.data_ptr<float>();
  const float *Y = y.data_ptr<float>(), *W = weight.data_ptr<float>();
  for (int64_t row = 0; row < rows; ++row) {
    float *hr = Hs + row * width, *o = O + row * width;
    const float* yr = Y + row * width;
    __m512 squares = _mm512_setzero_ps();
    for (int64_t e = 0; e < width; e += LANES) {
      const __mmask16 m = first(width - e);
      const __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, hr + e), _mm512_maskz_loadu_ps(m, yr + e));
      _mm512_mask_storeu_ps(hr + e, m, v);
      squares = _mm512_fmadd_ps(v, v, squares);
    }
    rms_scale(hr, W, o, width, _mm512_reduce_add_ps(squares), eps);
  }
  return out;
}

// decoder.py's _layers at a decode step, with every projection on the streamed GEMM and every other operation on
// the kernels above: the same calls in the same order, without the interpreter between them. Why by hand: the
// Python loop makes ~10 calls a layer, and each starts cold, its objects evicted by the weights just streamed
// (~4 ms of a 4x4 step's ~40, docs/performance.md item 18)
class DecodeLayers {
 public:
  // norms: each layer's input and post-attention norms, then the final norm (2L + 1), with their epsilons; panels
  // and biases: each layer's fused q/k/v, o, fused gate/up and down projections (4L; panels as streamed_gemm's pack)
  DecodeLayers(std::vector<torch::Tensor> norms, std::vector<double> eps, std::vector<torch::Tensor> panels,
               std::vector<c10::optional<torch::Tensor>> biases, int64_t q_heads, double scale)
      : norms_(std::move(norms)), eps_(std::move(eps)), panels_(std::move(panels)), biases_(std::move(biases)),
        q_heads_(q_heads), scale_(scale) {
    const auto layers = static_cast<int64_t>(panels_.size() / 4);
    TORCH_CHECK(layers > 0 && panels_.size() == 4 * static_cast<size_t>(layers) && biases_.size() == panels_.size() &&
                    norms_.size() == 2 * static_cast<size_t>(layers) + 1 && eps_.size() == norms_.size(),
                "DecodeLayers: 2L + 1 norms and epsilons, 4L panels and biases");
  }

  // h [B, 1, H] (the step's embeddings: the residual stream, updated in place); cos and signed sin [B, 1, 1, D];
  // per layer the prompt's keys [G, Hkv, D, P] and values [G, Hkv, P, D], the rows' own keys [G, Hkv, n, blocks,
  // D, 16] and values [G, Hkv, n, slots, D] (attention.SharedPromptCache), this step's key and value going to
  // slot `step` -> the hidden states after the final norm [B, 1, H]
  torch::Tensor step(torch::Tensor h, const torch::Tensor& cos, const torch::Tensor& sin,
                     const std::vector<torch::Tensor>& prefix_keys, const std::vector<torch::Tensor>& prefix_values,
                     const torch::Tensor& prefix_bias, std::vector<torch::Tensor> own_keys,
                     const std::vector<torch::Tensor>& own_values, int64_t n, int64_t step) const {
    const auto layers = static_cast<int64_t>(panels_.size() / 4);
    TORCH_CHECK(static_cast<int64_t>(prefix_keys.size()) == layers && prefix_values.size() == prefix_keys.size() &&
                    own_keys.size() == prefix_keys.size() && own_values.size() == prefix_keys.size() &&
                    h.dim() == 3 && h.size(1) == 1 && h.is_contiguous(),
                "DecodeLayers.step: one cache per layer, h [B, 1, H] contiguous");
    const auto B = h.size(0), H = h.size(2), Hq = q_heads_;
    auto x = rms_norm(h, norms_[0], eps_[0]);
    for (int64_t l = 0; l < layers; ++l) {
      const auto Hkv = own_keys[l].size(1), D = own_keys[l].size(4);
      const auto qkv = streamed_linear(x.view({B, H}), panels_[4 * l], biases_[4 * l]);  // [B, (Hq + 2 Hkv) D]
      TORCH_CHECK(qkv.size(1) == (Hq + 2 * Hkv) * D, "DecodeLayers.step: layer ", l, "'s q/k/v projection is ",
                  qkv.size(1), " wide, not (Hq + 2 Hkv) D = ", (Hq + 2 * Hkv) * D);
      const auto roped = rope(qkv.narrow(1, 0, (Hq + Hkv) * D).view({B, 1, Hq + Hkv, D}), cos, sin);
      auto values = own_values[l].narrow(3, 0, step + 1);
      const auto attn = decode_attention(
          roped.narrow(2, 0, Hq).transpose(1, 2), prefix_keys[l], prefix_values[l], prefix_bias, own_keys[l], values,
          n, scale_, roped.narrow(2, Hq, Hkv).transpose(1, 2),
          qkv.narrow(1, (Hq + Hkv) * D, Hkv * D).view({B, 1, Hkv, D}).transpose(1, 2));
      const auto o = streamed_linear(attn.view({B, Hq * D}), panels_[4 * l + 1], biases_[4 * l + 1]);
      x = add_rms_norm_(h, o, norms_[2 * l + 1], eps_[2 * l + 1]);
      const auto gate_up = streamed_linear(x.view({B, H}), panels_[4 * l + 2], biases_[4 * l + 2]);
      const auto down = streamed_linear(silu_mul(gate_up), panels_[4 * l + 3], biases_[4 * l + 3]);
      x = add_rms_norm_(h, down, norms_[2 * l + 2], eps_[2 * l + 2]);  // the next layer's input norm, or the final
    }
    return x;
  }

 private:
  std::vector<torch::Tensor> norms_;
  std::vector<double> eps_;
  std::vector<torch::Tensor> panels_;
  std::vector<c10::optional<torch::Tensor>> biases_;
  int64_t q_heads_;
  double scale_;
};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("decode_attention", &decode_attention);
  module.def("rms_norm", &rms_norm);
  module.def("rope", &rope);
  module.def("sample_rows", &sample_rows);
  module.def("silu_mul", &silu_mul);
  module.def("add_rms_norm_", &add_rms_norm_);
  pybind11::class_<DecodeLayers>(module, "DecodeLayers")
      .def(pybind11::init<std::vector<torch::Tensor>, std::vector<double>, std::vector<torch::Tensor>,
                          std::vector<c10::optional<torch::Tensor>>, int64_t, double>())
      .def("step", &DecodeLayers::step);
}
