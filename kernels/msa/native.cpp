// MSA's block-sparse attention forward, fused on the CPU, block-major as the reference's sparse
// path: per (batch, KV group, range of queries), the range's (query, selected block) pairs sorted
// by block, so each key block meets all the queries that chose it (times the group's heads) in
// products of up to 64 queries; each product folds into per-row softmax sums (running max m, sum
// l, the unnormalised output kept in the output tensor: FlashAttention's online softmax), and
// the rows are normalised once at the end. Keys are read through one block-transposed copy of K
// made per call (B, G, blocks, D, bs); products: kernels/native_gemm.h's micro-kernel.
//
// Why by hand: the reference's block-major loop (kernels/msa/reference.py, _sparse) does the
// same in torch ops, each a gather, a GEMM or a scatter-add with its own pass through memory;
// here a product's scores and weights stay in L1/L2. Forward only; the naive truth is
// kernels/msa/naive.py (tests/test_native.py).
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <limits>
#include <utility>
#include <vector>

#include "native_gemm.h"

namespace {

using attnbench::exp_shift_sum;
using attnbench::gemm_acc;
using attnbench::max_of;

constexpr int ROWS = 64;  // queries a product at most (its scores stay L2-sized however many chose a block)
// Queries a range: their output rows and sums stay in L2/L3 while the range's blocks pass (ranges of
// the whole sequence sent every row update to memory: 1.7 s at 64K; 64 queries made products of a
// few rows). At 64K with 8 of ~500 past blocks chosen, a block meets ~15 of a range's queries.
constexpr int64_t RANGE = 16384;

struct Buffers {
  std::vector<std::pair<int64_t, int>> pairs;  // (block, query row in the range)
  std::vector<float> a, s, t, m, l, alpha;
};

// One (batch, group, range [t0, t1) of queries): q (heads x T x D) of the group, ktb (blocks x D x bs),
// v (S x D), idx (T x top_k); o (heads x T x D) of the group, written.
void range_forward(const float* q, const float* ktb, const float* v, const int64_t* idx, float* o, int64_t T, int64_t S, int D,
                   int heads, int top_k, int bs, int64_t t0, int64_t t1, float scale, Buffers& b) {
  const int nq = static_cast<int>(t1 - t0);
  const int64_t off = S - T;
  b.pairs.clear();
  for (int r = 0; r < nq; ++r)
    for (int c = 0; c < top_k; ++c)
      if (idx[(t0 + r) * top_k + c] >= 0) b.pairs.emplace_back(idx[(t0 + r) * top_k + c], r);
  std::sort(b.pairs.begin(), b.pairs.end());
  b.m.assign(static_cast<size_t>(heads) * nq, -std::numeric_limits<float>::infinity());
  b.l.assign(static_cast<size_t>(heads) * nq, 0.f);
  b.a.resize(static_cast<size_t>(heads) * ROWS * D);
  b.s.resize(static_cast<size_t>(heads) * ROWS * bs);
  b.t.resize(static_cast<size_t>(heads) * ROWS * D);
  b.alpha.resize(static_cast<size_t>(heads) * ROWS);
  for (int h = 0; h < heads; ++h) std::fill(o + (h * T + t0) * D, o + (h * T + t1) * D, 0.f);
  for (size_t p = 0; p < b.pairs.size();) {
    const int64_t blk = b.pairs[p].first, j0 = blk * bs;
    size_t e = p;
    while (e < b.pairs.size() && e - p < ROWS && b.pairs[e].first == blk) ++e;
    const int mq = static_cast<int>(e - p), M = heads * mq, n = static_cast<int>(std::min<int64_t>(bs, S - j0));
    for (int h = 0; h < heads; ++h)  // row h * mq + i: head h, query pairs[p + i]
      for (int i = 0; i < mq; ++i) {
        const float* src = q + (h * T + t0 + b.pairs[p + i].second) * D;
        float* dst = b.a.data() + (h * mq + i) * D;
        for (int d = 0; d < D; ++d) dst[d] = src[d] * scale;
      }
    std::fill(b.s.begin(), b.s.begin() + static_cast<size_t>(M) * n, 0.f);
    gemm_acc(M, n, D, b.a.data(), D, ktb + blk * D * bs, bs, b.s.data(), n);
    for (int row = 0; row < M; ++row) {
      const int h = row / mq, r = b.pairs[p + row % mq].second, acc = h * nq + r;
      float* sr = b.s.data() + static_cast<size_t>(row) * n;
      const int64_t pos = off + t0 + r;                                             // the query's position
      const int valid = static_cast<int>(std::clamp<int64_t>(pos - j0 + 1, 0, n));  // keys j <= pos
      std::fill(sr + valid, sr + n, 0.f);
      float alpha = 1.f;
      if (valid > 0) {
        const float mx = std::max(b.m[acc], max_of(sr, valid));
        alpha = std::exp(b.m[acc] - mx);  // exp(-inf) = 0 on a row's first block
        b.l[acc] = b.l[acc] * alpha + exp_shift_sum(sr, valid, mx);
        b.m[acc] = mx;
      }
      b.alpha[row] = alpha;  // the output row's rescale, applied with this block's values below
    }
    std::fill(b.t.begin(), b.t.begin() + static_cast<size_t>(M) * D, 0.f);
    gemm_acc(M, D, n, b.s.data(), n, v + j0 * D, D, b.t.data(), D);
    for (int row = 0; row < M; ++row) {
      const int h = row / mq;
      float* orow = o + (h * T + t0 + b.pairs[p + row % mq].second) * D;
      const float* trow = b.t.data() + static_cast<size_t>(row) * D;
      for (int d = 0; d < D; ++d) orow[d] = orow[d] * b.alpha[row] + trow[d];
    }
    p = e;
  }
  for (int h = 0; h < heads; ++h)
    for (int r = 0; r < nq; ++r) {
      const float l = b.l[h * nq + r], inv = l > 0.f ? 1.f / l : 0.f;
      float* dst = o + (h * T + t0 + r) * D;
      for (int d = 0; d < D; ++d) dst[d] *= inv;
    }
}

}  // namespace

// q (B, H, T, D); ktb (B, G, blocks, D, bs) (K block-transposed, the last block zero-padded); v (B, G, S, D);
// block_idx (B, G, T, top_k) int64, -1 pads.
torch::Tensor forward(torch::Tensor q, torch::Tensor ktb, torch::Tensor v, torch::Tensor block_idx, int64_t block_size, double scale) {
  TORCH_CHECK(q.is_contiguous() && ktb.is_contiguous() && v.is_contiguous() && block_idx.is_contiguous(), "contiguous inputs");
  TORCH_CHECK(q.scalar_type() == at::kFloat && ktb.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat, "fp32 inputs");
  TORCH_CHECK(block_idx.scalar_type() == at::kLong, "int64 block ids");
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), G = v.size(1), S = v.size(2), blocks = ktb.size(2);
  const int D = static_cast<int>(q.size(3)), heads = static_cast<int>(H / G), top_k = static_cast<int>(block_idx.size(3));
  auto o = torch::empty_like(q);
  const int64_t per = (T + RANGE - 1) / RANGE, len = RANGE;
  const float *qp = q.data_ptr<float>(), *kp = ktb.data_ptr<float>(), *vp = v.data_ptr<float>();
  const int64_t* ip = block_idx.data_ptr<int64_t>();
  float* op = o.data_ptr<float>();
  at::parallel_for(0, B * G * per, 1, [&](int64_t w0, int64_t w1) {
    Buffers buf;
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t bg = w / per, t0 = (w % per) * len, t1 = std::min(T, t0 + len), b = bg / G, g = bg % G;
      if (t0 < t1)
        range_forward(qp + (b * H + g * heads) * T * D, kp + bg * blocks * D * block_size, vp + bg * S * D, ip + bg * T * top_k,
                      op + (b * H + g * heads) * T * D, T, S, D, heads, top_k, static_cast<int>(block_size), t0, t1,
                      static_cast<float>(scale), buf);
    }
  });
  return o;
}

bool avx2() { return ATTNBENCH_AVX2; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "MSA block-sparse attention forward, fused (CPU, fp32)");
  m.def("avx2", &avx2, "built with the AVX2/FMA micro-kernel");
}
