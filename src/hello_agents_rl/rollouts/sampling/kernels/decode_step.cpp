// A decode step's small operations, each one pass instead of several torch operations (why by hand: at a decode
// step's 16 rows each torch operation costs tens of microseconds of dispatch and passes over data the weight stream
// has just evicted from cache; 30 layers x ~15 of them are a fifth of the step):
// * decode_attention: attention.py's grouped_attention (each group's prompt keys and values read once for its rows);
// * rms_norm: F.rms_norm with a weight over the last dimension;
// * rope: decoder.py's apply_rope, x * cos + roll(x, D/2) * signed_sin.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <cmath>
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

inline float dot(const float* __restrict a, const float* __restrict b, int64_t d) {
  __m512 acc = _mm512_mul_ps(_mm512_loadu_ps(a), _mm512_loadu_ps(b));
  for (int64_t e = LANES; e < d; e += LANES) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + e), _mm512_loadu_ps(b + e), acc);
  return _mm512_reduce_add_ps(acc);
}

// the cache rows a few steps ahead, into L1: the decode step's weight stream has evicted them
constexpr int64_t AHEAD = 4;
inline void prefetch_row(const float* row, int64_t d) {
  for (int64_t e = 0; e < d; e += LANES) _mm_prefetch(reinterpret_cast<const char*>(row + e), _MM_HINT_T0);
}

inline void axpy(float w, const float* __restrict x, float* __restrict y, int64_t d) {
  const __m512 wv = _mm512_set1_ps(w);
  for (int64_t e = 0; e < d; e += LANES)
    _mm512_storeu_ps(y + e, _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + e), _mm512_loadu_ps(y + e)));
}

// s[0..len) <- exp(s - max), returns the sum (the tail beyond a multiple of 16 masked)
inline float exp_and_sum(float* s, int64_t len, float max) {
  const __m512 m = _mm512_set1_ps(max);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t i = 0; i < len; i += LANES) {
    const __mmask16 k = len - i >= LANES ? 0xFFFF : static_cast<__mmask16>((1u << (len - i)) - 1);
    const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s + i), m));
    _mm512_mask_storeu_ps(s + i, k, e);
    sum = _mm512_mask_add_ps(sum, k, sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

}  // namespace

// q [B, Hq, 1, D] (B = G * n, a group's rows adjacent); prefix keys, values [G, Hkv, P, D]; prefix_bias
// [G * Hkv, n * r, P] (0 or -inf); own keys, values [G, Hkv, n, T, D] (T valid slots, any slot stride) -> [B, Hq, 1, D]
torch::Tensor decode_attention(const torch::Tensor& q_in, const torch::Tensor& pk_in, const torch::Tensor& pv_in,
                               const torch::Tensor& bias_in, const torch::Tensor& ok, const torch::Tensor& ov,
                               int64_t n, double scale) {
  const auto B = q_in.size(0), Hq = q_in.size(1), D = q_in.size(3);
  const auto G = pk_in.size(0), Hkv = pk_in.size(1), P = pk_in.size(2), T = ok.size(3);
  const auto r = Hq / Hkv;
  TORCH_CHECK(D % LANES == 0 && B == G * n && Hq == Hkv * r && ok.stride(4) == 1 && ov.stride(4) == 1 &&
                  q_in.scalar_type() == torch::kFloat,
              "decode_attention: fp32, head_dim a multiple of 16, B = groups * n, own caches contiguous in D");
  const auto q = q_in.contiguous(), pk = pk_in.contiguous(), pv = pv_in.contiguous(), bias = bias_in.contiguous();
  auto out = torch::empty({B, Hq, 1, D}, q.options());
  const float *Q = q.data_ptr<float>(), *PK = pk.data_ptr<float>(), *PV = pv.data_ptr<float>();
  const float *BIAS = bias.data_ptr<float>(), *OK = ok.data_ptr<float>(), *OV = ov.data_ptr<float>();
  const auto ks = ok.strides(), vs = ov.strides();
  float* O = out.data_ptr<float>();
  const auto rows = n * r;  // a key head's queries in a group
  at::parallel_for(0, G * Hkv, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> qs(rows * D), scores(rows * (P + T)), acc(rows * D), inv(rows);
    for (int64_t gh = lo; gh < hi; ++gh) {
      const int64_t g = gh / Hkv, kh = gh % Hkv;
      for (int64_t i = 0; i < n; ++i)  // the queries, scaled: row i, head j at qs[(i * r + j) * D]
        for (int64_t j = 0; j < r; ++j) {
          const float* src = Q + ((g * n + i) * Hq + kh * r + j) * D;
          for (int64_t e = 0; e < D; ++e) qs[(i * r + j) * D + e] = src[e] * static_cast<float>(scale);
        }
      const float *keys = PK + gh * P * D, *values = PV + gh * P * D, *b = BIAS + gh * rows * P;
      for (int64_t p = 0; p < P; ++p) {  // the prompt's keys, each read once for all the group's queries
        if (p + AHEAD < P) prefetch_row(keys + (p + AHEAD) * D, D);
        for (int64_t x = 0; x < rows; ++x)
          scores[x * (P + T) + p] = b[x * P + p] + dot(qs.data() + x * D, keys + p * D, D);
      }
      for (int64_t i = 0; i < n; ++i) {  // each row's own keys
        const float* own = OK + g * ks[0] + kh * ks[1] + i * ks[2];
        for (int64_t t = 0; t < T; ++t) {
          if (t + AHEAD < T) prefetch_row(own + (t + AHEAD) * ks[3], D);
          for (int64_t j = 0; j < r; ++j) {
            const int64_t x = i * r + j;
            scores[x * (P + T) + P + t] = dot(qs.data() + x * D, own + t * ks[3], D);
          }
        }
      }
      for (int64_t x = 0; x < rows; ++x) {
        float* s = scores.data() + x * (P + T);
        float m = -INFINITY;
        for (int64_t p = 0; p < P + T; ++p) m = std::max(m, s[p]);
        inv[x] = 1.0f / exp_and_sum(s, P + T, m);
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t p = 0; p < P; ++p) {  // the prompt's values, each read once
        if (p + AHEAD < P) prefetch_row(values + (p + AHEAD) * D, D);
        for (int64_t x = 0; x < rows; ++x) {
          const float w = scores[x * (P + T) + p];
          if (w != 0.0f) axpy(w, values + p * D, acc.data() + x * D, D);
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        const float* own = OV + g * vs[0] + kh * vs[1] + i * vs[2];
        for (int64_t t = 0; t < T; ++t) {
          if (t + AHEAD < T) prefetch_row(own + (t + AHEAD) * vs[3], D);
          for (int64_t j = 0; j < r; ++j) {
            const int64_t x = i * r + j;
            axpy(scores[x * (P + T) + P + t], own + t * vs[3], acc.data() + x * D, D);
          }
        }
      }
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < r; ++j) {
          const int64_t x = i * r + j;
          float* dst = O + ((g * n + i) * Hq + kh * r + j) * D;
          for (int64_t e = 0; e < D; ++e) dst[e] = acc[x * D + e] * inv[x];
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
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(h) + static_cast<float>(eps));
    for (e = 0; e < h; ++e) yr[e] = xr[e] * inv * W[e];
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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("decode_attention", &decode_attention);
  module.def("rms_norm", &rms_norm);
  module.def("rope", &rope);
}
