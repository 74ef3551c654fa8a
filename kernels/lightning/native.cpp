// Lightning attention forward, fused on the CPU: the chunked form of kernels/lightning/reference.py
// (Lightning Attention-2) in one pass per (batch, head) pair, every chunk's four small products
// done by the register-blocked micro-kernel of kernels/native_gemm.h on buffers that stay in L1.
//
// Why by hand: the reference spends ~80% of its time in torch's bmm/baddbmm on (C x D) x (D x D)
// batches of 64, which reach about half the calibrated matmul peak, plus elementwise passes over
// (P, N, C, C) tensors between them. No torch op (nor Inductor's C++ codegen, which calls the
// same GEMM) fuses a chunk's mask, products and state update; this does, with no temporaries
// bigger than a chunk. Forward only (inference, prefill, timing): training keeps the reference.
//
// Per pair, decay rate s, chunk c of L tokens (L = C except a ragged tail), state S (Dk x Dv):
//   A = (Q K^T) * M,  M[i, j] = exp(-s (i - j)) for j <= i else 0        (L x L)
//   O = A V + diag(exp(-s (i + 1))) Q S_in                                 (L x Dv)
//   S = exp(-s L) S + (diag(exp(-s (L - 1 - j))) K)^T V                   (float64 carry)
// The naive truth is kernels/lightning/naive.py; tests/test_native.py checks it.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <vector>

#include "native_gemm.h"

namespace {

using attnbench::gemm_acc;

void pair_forward(const float* q, const float* k, const float* v, float* o, double* S64, double s, int64_t T, int Dk, int Dv,
                  int chunk) {
  const int C = chunk;
  std::vector<float> mask(C * C), qscale(C), kscale(C), A(C * C), kT(Dk * C), ksT(Dk * C), qs(C * Dk), S32(Dk * Dv),
      kv(Dk * Dv);
  for (int i = 0; i < C; ++i) {
    for (int j = 0; j < C; ++j) mask[i * C + j] = j <= i ? static_cast<float>(std::exp(-s * (i - j))) : 0.f;
    qscale[i] = static_cast<float>(std::exp(-s * (i + 1)));
  }
  for (int64_t t0 = 0; t0 < T; t0 += C) {
    const int L = static_cast<int>(std::min<int64_t>(C, T - t0));
    const float *qc = q + t0 * Dk, *kc = k + t0 * Dk, *vc = v + t0 * Dv;
    float* oc = o + t0 * Dv;
    if (t0 == 0 || L < C)  // decay from token j to the chunk's end: the same for every full chunk
      for (int j = 0; j < L; ++j) kscale[j] = static_cast<float>(std::exp(-s * (L - 1 - j)));
    for (int d = 0; d < Dk; ++d)
      for (int j = 0; j < L; ++j) {
        const float x = kc[j * Dk + d];
        kT[d * C + j] = x;
        ksT[d * C + j] = x * kscale[j];
      }
    // A = (Q K^T) * M
    std::fill(A.begin(), A.begin() + L * C, 0.f);
    gemm_acc(L, L, Dk, qc, Dk, kT.data(), C, A.data(), C);
    for (int i = 0; i < L; ++i)
      for (int j = 0; j < L; ++j) A[i * C + j] *= mask[i * C + j];  // zero above the diagonal
    // O = A V + diag(qscale) Q S_in
    std::fill(oc, oc + static_cast<int64_t>(L) * Dv, 0.f);
    gemm_acc(L, Dv, L, A.data(), C, vc, Dv, oc, Dv, /*causal=*/true);
    for (int i = 0; i < Dk * Dv; ++i) S32[i] = static_cast<float>(S64[i]);
    for (int i = 0; i < L; ++i)
      for (int d = 0; d < Dk; ++d) qs[i * Dk + d] = qc[i * Dk + d] * qscale[i];
    gemm_acc(L, Dv, Dk, qs.data(), Dk, S32.data(), Dv, oc, Dv);
    // S = exp(-s L) S + Ks^T V, the carry in float64
    std::fill(kv.begin(), kv.end(), 0.f);
    gemm_acc(Dk, Dv, L, ksT.data(), C, vc, Dv, kv.data(), Dv);
    const double a = std::exp(-s * L);
    for (int i = 0; i < Dk * Dv; ++i) S64[i] = a * S64[i] + kv[i];
  }
}

}  // namespace

// q, k (P, T, Dk), v (P, T, Dv) contiguous fp32 on the CPU; s (P,) float64 decay rates; state (P, Dk, Dv)
// float64, updated in place to the state after the last token. Returns o (P, T, Dv) fp32.
torch::Tensor forward(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor s, torch::Tensor state, int64_t chunk) {
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous() && state.is_contiguous(), "contiguous inputs");
  TORCH_CHECK(q.scalar_type() == at::kFloat && v.scalar_type() == at::kFloat && state.scalar_type() == at::kDouble, "dtypes");
  const int64_t P = q.size(0), T = q.size(1);
  const int Dk = static_cast<int>(q.size(2)), Dv = static_cast<int>(v.size(2));
  auto o = torch::empty({P, T, Dv}, q.options());
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const double* sp = s.data_ptr<double>();
  double* Sp = state.data_ptr<double>();
  float* op = o.data_ptr<float>();
  at::parallel_for(0, P, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      pair_forward(qp + p * T * Dk, kp + p * T * Dk, vp + p * T * Dv, op + p * T * Dv, Sp + p * Dk * Dv, sp[p], T, Dk, Dv,
                   static_cast<int>(chunk));
  });
  return o;
}

bool avx2() { return ATTNBENCH_AVX2; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "lightning attention forward, fused (CPU, fp32)");
  m.def("avx2", &avx2, "built with the AVX2/FMA micro-kernel");
}
