// y = x W^T (+ b) for a decode step's rows (<= 64) on a frozen fp32 weight packed into panels of 16 output columns,
// [N/16][K][16], streamed once per call with a software prefetch into L2: blocks of 16 rows x 1 panel up to 16
// rows (memory-bound), tiles of 6 rows x 4 panels above (compute-bound: 8x8's 64 rows).
// Why by hand: at these rows MKL's and oneDNN's fp32 GEMMs read a weight panel, then compute on it, one after the
// other (docs/performance.md, gemm-limits); here the arithmetic runs while later lines are already on their way.
#pragma once
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>
#include <algorithm>
#include <array>
#include <utility>
#include <vector>

namespace {

constexpr int64_t PANEL = 16;             // output columns per panel: one AVX-512 register of fp32
constexpr int64_t LANES_W = 16;           // fp32 lanes of a register
constexpr int64_t PREFETCH_FLOATS = 1024; // 4 KB ahead: the best of 0.5-32 KB tried on a 2-core Xeon

// rows x 16 outputs of one panel: acc[m] += x[m][k] * panel[k][:], each x[m][k] broadcast from x's own rows (ldx
// apart: no transposed copy of x, whose scattered stores cost more than a small call's product)
template <int ROWS>
void panel_block(const float* __restrict panel, const float* __restrict x, int64_t ldx, int64_t k,
                 float* __restrict y, int64_t ldy, bool prefetch) {
  __m512 acc[ROWS];
#pragma GCC unroll 16
  for (int m = 0; m < ROWS; ++m) acc[m] = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (int64_t i = 0; i < k; ++i) {  // unrolled: hot in cache 31 GB/s of weights against 26 rolled (MKL's 30)
    if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(panel + i * PANEL + PREFETCH_FLOATS), _MM_HINT_T1);
    const __m512 w = _mm512_loadu_ps(panel + i * PANEL);
#pragma GCC unroll 16
    for (int m = 0; m < ROWS; ++m) acc[m] = _mm512_fmadd_ps(_mm512_set1_ps(x[m * ldx + i]), w, acc[m]);
  }
#pragma GCC unroll 16
  for (int m = 0; m < ROWS; ++m) _mm512_storeu_ps(y + m * ldy, acc[m]);
}

using Block = void (*)(const float*, const float*, int64_t, int64_t, float*, int64_t, bool);
constexpr Block BLOCKS[PANEL + 1] = {
    nullptr,          panel_block<1>,  panel_block<2>,  panel_block<3>,  panel_block<4>,  panel_block<5>,
    panel_block<6>,   panel_block<7>,  panel_block<8>,  panel_block<9>,  panel_block<10>, panel_block<11>,
    panel_block<12>,  panel_block<13>, panel_block<14>, panel_block<15>, panel_block<16>};

// MR rows x PC panels at once, for more rows than one register block of the above holds (8x8's 64 rows, where the
// product is compute-bound): 6 rows x 4 panels keep 24 accumulators in registers, each k step 24 FMAs on 4 weight
// loads and 6 broadcasts (the 16-row block's 16 FMAs take 17 loads); later row blocks find the 4 panels in L2
// ahead, step: the next tile's panels, `step` floats of them sent for into L2 per k step (its first row block takes
// them in from memory otherwise, while the other row blocks leave the memory idle)
template <int MR, int PC>
void tile(const float* __restrict panel, int64_t k, const float* __restrict x, int64_t ldx, float* __restrict y,
          int64_t ldy, bool prefetch, const float* ahead, int64_t step) {
  __m512 acc[MR][PC];
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int c = 0; c < PC; ++c) acc[m][c] = _mm512_setzero_ps();
  const int64_t stride = k * PANEL;  // between the tile's panels
#pragma GCC unroll 2
  for (int64_t i = 0; i < k; ++i) {
    if (ahead) _mm_prefetch(reinterpret_cast<const char*>(ahead + i * step), _MM_HINT_T1);
    __m512 w[PC];
#pragma GCC unroll 8
    for (int c = 0; c < PC; ++c) {
      if (prefetch)
        _mm_prefetch(reinterpret_cast<const char*>(panel + c * stride + i * PANEL + PREFETCH_FLOATS), _MM_HINT_T1);
      w[c] = _mm512_loadu_ps(panel + c * stride + i * PANEL);
    }
#pragma GCC unroll 16
    for (int m = 0; m < MR; ++m) {
      const __m512 xm = _mm512_set1_ps(x[m * ldx + i]);
#pragma GCC unroll 8
      for (int c = 0; c < PC; ++c) acc[m][c] = _mm512_fmadd_ps(xm, w[c], acc[m][c]);
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 8
    for (int c = 0; c < PC; ++c) _mm512_storeu_ps(y + m * ldy + c * PANEL, acc[m][c]);
}

#ifndef TILE_SHAPE_ROWS
#define TILE_SHAPE_ROWS 6
#define TILE_SHAPE_PANELS 4
#endif
constexpr int TILE_ROWS = TILE_SHAPE_ROWS, TILE_PANELS = TILE_SHAPE_PANELS;
using Tile = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool, const float*, int64_t);
template <int MR, int... PC>
constexpr std::array<Tile, TILE_PANELS + 1> tile_row(std::integer_sequence<int, PC...>) {
  return {nullptr, tile<MR, PC + 1>...};
}
template <int... MR>
constexpr std::array<std::array<Tile, TILE_PANELS + 1>, TILE_ROWS + 1> tile_table(std::integer_sequence<int, MR...>) {
  return {std::array<Tile, TILE_PANELS + 1>{}, tile_row<MR + 1>(std::make_integer_sequence<int, TILE_PANELS>{})...};
}
constexpr auto TILES = tile_table(std::make_integer_sequence<int, TILE_ROWS>{});

}  // namespace

// weight [N, K] -> panels [N/16, K, 16] (N a multiple of 16)
inline torch::Tensor pack(const torch::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == torch::kFloat && weight.size(0) % PANEL == 0,
              "pack: an fp32 [N, K] weight with N a multiple of 16");
  const auto n = weight.size(0), k = weight.size(1);
  return weight.reshape({n / PANEL, PANEL, k}).transpose(1, 2).contiguous();
}

// x [M, K] -> [M, N]: x W^T (+ bias [N])
inline torch::Tensor streamed_linear(const torch::Tensor& x_in, const torch::Tensor& panels,
                                     const c10::optional<torch::Tensor>& bias) {
  TORCH_CHECK(x_in.dim() == 2 && x_in.scalar_type() == torch::kFloat && panels.dim() == 3 &&
                  panels.size(1) == x_in.size(1) && panels.size(2) == PANEL && panels.is_contiguous(),
              "linear: x [M, K] fp32 and panels [N/16, K, 16]");
  const auto m = x_in.size(0), k = x_in.size(1), count = panels.size(0), n = count * PANEL;
  const auto x = x_in.contiguous();
  auto y = torch::empty({m, n}, x_in.options());
  const float* p = panels.data_ptr<float>();
  const float* xs = x.data_ptr<float>();
  float* ys = y.data_ptr<float>();
  if (m > 0 && m <= PANEL) {  // memory-bound: one block of all the rows per panel, each thread its run of panels
    at::parallel_for(0, count, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) BLOCKS[m](p + j * k * PANEL, xs, k, k, ys + j * PANEL, n, true);
    });
  } else if (m > PANEL) {  // compute-bound: tiles of 6 rows x 4 panels, each thread its own run of panels
    at::parallel_for(0, count, 1, [&](int64_t lo, int64_t hi) {
      const auto row_blocks = (m + TILE_ROWS - 1) / TILE_ROWS;
      for (int64_t j = lo; j < hi; j += TILE_PANELS) {
        const auto panels_here = std::min<int64_t>(TILE_PANELS, hi - j);
        const auto next = j + TILE_PANELS, next_panels = std::min<int64_t>(TILE_PANELS, hi - next);
        // the next tile's panels spread over this tile's later row blocks: 1/2 to 1 line per k step
        const int64_t step = row_blocks > 1 && next_panels > 0
            ? std::clamp<int64_t>((next_panels * PANEL + row_blocks - 2) / (row_blocks - 1), PANEL / 2, PANEL) : 0;
        const float* next_start = p + next * k * PANEL;
        for (int64_t b = 0; b < row_blocks; ++b) {
          const auto row = b * TILE_ROWS, rows = std::min<int64_t>(TILE_ROWS, m - row);
          // this row block's share of the next tile, if any of it is left
          const bool fetching = b > 0 && step && (b - 1) * step < next_panels * PANEL;
          TILES[rows][panels_here](p + j * k * PANEL, k, xs + row * k, k, ys + row * n + j * PANEL, n,
                                   b == 0 && j == lo, fetching ? next_start + (b - 1) * k * step : nullptr, step);
        }
      }
    });
  }
  if (bias.has_value() && bias->defined()) y.add_(*bias);
  return y;
}

