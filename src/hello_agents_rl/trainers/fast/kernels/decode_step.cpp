// A decode step's small operations, each one pass instead of several torch operations (why by hand: at a decode
// step's 16 rows each torch operation costs tens of microseconds of dispatch and passes over data the weight stream
// has just evicted from cache; 30 layers x ~15 of them are a fifth of the step):
// * decode_attention: attention.py's grouped_attention (each group's prompt keys and values read once for its rows);
// * rms_norm: F.rms_norm with a weight over the last dimension;
// * rope: decoder.py's apply_rope, x * cos + roll(x, D/2) * signed_sin;
#include "decode_step_simd.h"


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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
  module.def("decode_attention", &decode_attention);
  module.def("rms_norm", &rms_norm);
  module.def("rope", &rope);
}
