// The CPU's native kernels' one small-matrix product (kernels/*/native.cpp include it): a
// register-blocked AVX2/FMA micro-kernel, 6 rows x 16 columns, on buffers that stay in L1/L2.
// Why by hand: torch's GEMMs reach about half the calibrated peak on the (64 x 64) x (64 x 64)
// products attention's chunks and blocks are made of, and no torch op fuses the masks, softmax or
// state updates between them; a kernel that does must do its own small products.
#pragma once
#include <algorithm>
#include <cmath>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define ATTNBENCH_AVX2 1
#else
#define ATTNBENCH_AVX2 0
#endif

namespace attnbench {

// C[R x 16] += A[R x K] (row stride lda) * B[K x 16] (row stride ldb): 2R accumulators in registers.
// Named registers, not an array: GCC keeps an array of __m256 on the stack and stores it every k.
#if ATTNBENCH_AVX2
#define AB_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define AB_DECL(r) __m256 c##r##0 = _mm256_setzero_ps(), c##r##1 = _mm256_setzero_ps();
#define AB_LOAD(r) if constexpr (R > r) { c##r##0 = _mm256_loadu_ps(C + r * ldc); c##r##1 = _mm256_loadu_ps(C + r * ldc + 8); }
#define AB_FMA(r)                                            \
  if constexpr (R > r) {                                     \
    const __m256 a = _mm256_broadcast_ss(A + r * lda + k);   \
    c##r##0 = _mm256_fmadd_ps(a, b0, c##r##0);               \
    c##r##1 = _mm256_fmadd_ps(a, b1, c##r##1);               \
  }
#define AB_STORE(r) if constexpr (R > r) { _mm256_storeu_ps(C + r * ldc, c##r##0); _mm256_storeu_ps(C + r * ldc + 8, c##r##1); }
#endif
template <int R>
inline void block16(int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
#if ATTNBENCH_AVX2
  AB_ROWS(AB_DECL)
  AB_ROWS(AB_LOAD)
  for (int k = 0; k < K; ++k) {
    const __m256 b0 = _mm256_loadu_ps(B + k * ldb), b1 = _mm256_loadu_ps(B + k * ldb + 8);
    AB_ROWS(AB_FMA)
  }
  AB_ROWS(AB_STORE)
#else
  for (int r = 0; r < R; ++r)
    for (int k = 0; k < K; ++k)
      for (int n = 0; n < 16; ++n) C[r * ldc + n] += A[r * lda + k] * B[k * ldb + n];
#endif
}

inline void rows16(int rows, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc) {
  switch (rows) {
    case 1: block16<1>(K, A, lda, B, ldb, C, ldc); break;
    case 2: block16<2>(K, A, lda, B, ldb, C, ldc); break;
    case 3: block16<3>(K, A, lda, B, ldb, C, ldc); break;
    case 4: block16<4>(K, A, lda, B, ldb, C, ldc); break;
    case 5: block16<5>(K, A, lda, B, ldb, C, ldc); break;
    default: block16<6>(K, A, lda, B, ldb, C, ldc); break;
  }
}

// C[M x N] += A[M x K] B[K x N], row-major with strides; `causal`: row i needs only k <= i (A's
// upper triangle is zero), so a block of rows stops at its last row's k.
inline void gemm_acc(int M, int N, int K, const float* A, int lda, const float* B, int ldb, float* C, int ldc, bool causal = false) {
  const int N16 = N / 16 * 16;
  for (int m = 0; m < M; m += 6) {
    const int rows = std::min(6, M - m);
    const int kk = causal ? std::min(K, m + rows) : K;
    for (int n = 0; n < N16; n += 16) rows16(rows, kk, A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc);
    for (int r = m; r < m + rows; ++r)  // columns past the last multiple of 16 (head dims 8, 24, ...)
      for (int k = 0; k < (causal ? std::min(K, r + 1) : K); ++k) {
        const float a = A[r * lda + k];
        for (int n = N16; n < N; ++n) C[r * ldc + n] += a * B[k * ldb + n];
      }
  }
}

#if ATTNBENCH_AVX2
// exp of 8 floats, Cephes' expf: a range reduction by ln 2 and a degree-5 polynomial (relative
// error ~2 ulp over [-87, 88]; below that it returns 0). softmax's weights need one exp a score.
inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), _mm256_set1_ps(-87.3365447505531f));
  __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}
#endif

// In place over x[0, n): x = exp(x - m); returns their sum.
inline float exp_shift_sum(float* x, int n, float m) {
  int i = 0;
  float sum = 0.f;
#if ATTNBENCH_AVX2
  __m256 acc = _mm256_setzero_ps();
  const __m256 mv = _mm256_set1_ps(m);
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float l : lanes) sum += l;
#endif
  for (; i < n; ++i) sum += (x[i] = std::exp(x[i] - m));
  return sum;
}

inline float max_of(const float* x, int n) {
  float m = x[0];
  int i = 0;
#if ATTNBENCH_AVX2
  if (n >= 8) {
    __m256 mv = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(x + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, mv);
    for (float l : lanes) m = std::max(m, l);
  }
#endif
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

}  // namespace attnbench
