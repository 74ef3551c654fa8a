// Causal sliding-window GQA attention forward, fused on the CPU: per (batch, KV group, block of
// queries), the block's keys transposed once for the group's query heads, then for each head the
// scores of each 6-query row block over exactly the keys its band reaches, the softmax in place
// (vectorised exp), and the weighted sum of values; nothing bigger than a block's (queries x
// window) scores is ever written. Products: kernels/native_gemm.h's micro-kernel.
//
// Why by hand: the reference (kernels/sliding_window/reference.py) calls SDPA per block with a
// band mask: SDPA computes the whole (block x (window + block)) rectangle and masks it, and the
// CPU's flash kernel skips masked work only in whole key blocks. Forward only; the naive truth is
// kernels/sliding_window/naive.py (tests/test_native.py).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <vector>

#include "native_gemm.h"

namespace {

using attnbench::exp_shift_sum;
using attnbench::gemm_acc;
using attnbench::max_of;

constexpr int BLOCK = 64;  // queries a block

// One (batch, group, query block): q (H/G heads of T x D), k, v (S x D) of the group.
void block_forward(const float* q, const float* k, const float* v, float* o, int64_t T, int64_t S, int D, int heads,
                   int64_t i0, int64_t window, float scale, std::vector<float>& kt, std::vector<float>& sc,
                   std::vector<float>& qs, std::vector<float>& ob) {
  const int64_t off = S - T, p0 = off + i0;  // absolute position of the block's first query
  const int nq = static_cast<int>(std::min<int64_t>(BLOCK, T - i0));
  const int64_t lo = std::max<int64_t>(0, p0 - window + 1), hi = p0 + nq;
  const int n = static_cast<int>(hi - lo), np = (n + 15) / 16 * 16;
  kt.assign(static_cast<size_t>(D) * np, 0.f);
  sc.resize(static_cast<size_t>(BLOCK) * np);
  qs.resize(static_cast<size_t>(BLOCK) * D);
  ob.resize(static_cast<size_t>(BLOCK) * D);
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < D; ++d) kt[d * np + j] = k[(lo + j) * D + d];
  const float* vb = v + lo * D;
  for (int h = 0; h < heads; ++h) {
    const float* qh = q + (h * T + i0) * D;
    for (int i = 0; i < nq * D; ++i) qs[i] = qh[i] * scale;
    std::fill(ob.begin(), ob.begin() + nq * D, 0.f);
    for (int m = 0; m < nq; m += 6) {
      const int rows = std::min(6, nq - m);
      // row r sees keys [max(lo, p - window + 1), p] of positions, columns c0..c1 here
      const int k0 = static_cast<int>(std::max(lo, p0 + m - window + 1) - lo), k1 = static_cast<int>(p0 + m + rows - lo);
      const int n0 = k0 / 16 * 16, n1 = std::min(np, (k1 + 15) / 16 * 16);
      float* s = sc.data() + m * np;
      for (int r = 0; r < rows; ++r) std::fill(s + r * np + n0, s + r * np + n1, 0.f);
      gemm_acc(rows, n1 - n0, D, qs.data() + m * D, D, kt.data() + n0, np, s + n0, np);
      float inv[6];
      for (int r = 0; r < rows; ++r) {
        const int64_t p = p0 + m + r;
        const int c0 = static_cast<int>(std::max(lo, p - window + 1) - lo), c1 = static_cast<int>(p - lo);  // inclusive
        float* row = s + r * np;
        const float mx = max_of(row + c0, c1 - c0 + 1);
        inv[r] = 1.f / exp_shift_sum(row + c0, c1 - c0 + 1, mx);
        std::fill(row + k0, row + c0, 0.f);
        std::fill(row + c1 + 1, row + k1, 0.f);
      }
      gemm_acc(rows, D, k1 - k0, s + k0, np, vb + k0 * D, D, ob.data() + m * D, D);
      float* oh = o + (h * T + i0 + m) * D;
      for (int r = 0; r < rows; ++r)
        for (int d = 0; d < D; ++d) oh[r * D + d] = ob[(m + r) * D + d] * inv[r];
    }
  }
}

}  // namespace

// q (B, H, T, D); k, v (B, G, S, D), S >= T (queries the last T), contiguous fp32 on the CPU.
torch::Tensor forward(torch::Tensor q, torch::Tensor k, torch::Tensor v, int64_t window, double scale) {
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(), "contiguous inputs");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat, "fp32 inputs");
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), G = k.size(1), S = k.size(2);
  const int D = static_cast<int>(q.size(3)), heads = static_cast<int>(H / G);
  TORCH_CHECK(H % G == 0 && S >= T && window >= 1, "shapes");
  auto o = torch::empty_like(q);
  const int64_t blocks = (T + BLOCK - 1) / BLOCK;
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  float* op = o.data_ptr<float>();
  at::parallel_for(0, B * G * blocks, 1, [&](int64_t w0, int64_t w1) {
    std::vector<float> kt, sc, qs, ob;
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t bg = w / blocks, i0 = (w % blocks) * BLOCK, b = bg / G, g = bg % G;
      block_forward(qp + (b * H + g * heads) * T * D, kp + bg * S * D, vp + bg * S * D, op + (b * H + g * heads) * T * D, T, S, D,
                    heads, i0, window, static_cast<float>(scale), kt, sc, qs, ob);
    }
  });
  return o;
}

bool avx2() { return ATTNBENCH_AVX2; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "sliding-window attention forward, fused (CPU, fp32)");
  m.def("avx2", &avx2, "built with the AVX2/FMA micro-kernel");
}
