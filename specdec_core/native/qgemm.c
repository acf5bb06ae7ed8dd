/* Matmuls on 4-bit and 8-bit weight codes for CPU decoding and verification (x86-64, AVX2+FMA).

   y[M, N] = x[M, K] @ W[N, K].T, float32 in and out, W decoded from codes on the fly:
     4-bit: W = code * scale - offset, code 0..15, one scale and offset per 32 along k
            (a GGUF's Q4_K and Q4_0 blocks, and the draft's requantized layers);
     8-bit: W = code * scale, code -128..127, one scale per 16 along k (a GGUF's Q6_K blocks).
   Each W value is one fused multiply(-subtract) of exact inputs, so it equals the GGUF's own
   dequantized float32 weight bit for bit (see native_linear.py).

   Why not torch's int4 kernel: on AVX2 it decodes the weights once per tile of 4 rows and
   keeps 16 accumulators in 16 registers (spilling), so a 5-row verification costs ~3x a
   1-row step. Here the decoding cost is paid once per weight whatever the row count:
   - M <= 4 rows: decode in registers; M == 1 walks 4 panels side by side, so 8 independent
     accumulator chains hide the FMA latency (5 rows in registers spill: slower);
   - M >= 5 rows: decode 256 k-values of a panel into a 16 KB buffer (L1), then a 6-row x
     16-column register tile streams over it while the next chunk's codes are prefetched.

   Exactness across row counts (what makes greedy speculative == standard decoding): every
   output element is acc = fma(x[m, k], W[n, k], acc) over k = 0..K-1 in order, from 0, in its
   own float32 lane, in both paths; the buffered path only stores and reloads the running sum
   between chunks. So a row's result never depends on how many rows share the call.

   Layout ("panels" of 16 output columns, n = 16 p + j):
     4-bit codes  uint8 [N/16][K][8]:  byte j holds column j (low nibble) and j+8 (high nibble)
     8-bit codes  int8  [N/16][K][16]
     scale/offset float32 [N/16][K/32 or K/16][16]
   Threads: OpenMP over panels. Linked by soname to libgomp.so.1, which resolves to the
   runtime torch already loaded, so both share one thread pool.
*/
#include <immintrin.h>
#include <stdint.h>
#include <stddef.h>

#define NP 16  /* output columns per panel */
#define KC 256 /* k values dequantized at a time by the buffered path (16 KB of float32) */
#define MB 6   /* rows per register tile of the buffered path: 12 accumulators */

/* The 16 4-bit codes of one panel row (8 bytes) as floats: columns 0-7, then 8-15. */
static inline __attribute__((always_inline)) void codes4(const uint8_t* row, __m256* c0, __m256* c1) {
  const __m256i i = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)row));
  *c0 = _mm256_cvtepi32_ps(_mm256_and_si256(i, _mm256_set1_epi32(0xF)));
  *c1 = _mm256_cvtepi32_ps(_mm256_srli_epi32(i, 4));
}

/* The 16 weights of panel row k from its codes and its group's scale (and offset), as two
   vectors of 8 (columns 0-7 and 8-15). Both code paths decode through this one function, so
   they form the same weights bit for bit. */
static inline __attribute__((always_inline)) void decode16(const int BITS, const uint8_t* codes,
    int64_t k, __m256 s0, __m256 s1, __m256 o0, __m256 o1, __m256* w0, __m256* w1) {
  if (BITS == 4) {
    __m256 c0, c1;
    codes4(codes + k * 8, &c0, &c1);
    *w0 = _mm256_fmsub_ps(c0, s0, o0);
    *w1 = _mm256_fmsub_ps(c1, s1, o1);
  } else {
    const __m128i q = _mm_loadu_si128((const __m128i*)(codes + k * 16));
    *w0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), s0);
    *w1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), s1);
  }
}

/* Scale and offset of group g (the 8-bit form has no offset). */
static inline __attribute__((always_inline)) void group_scale(const int BITS, const float* scale,
    const float* offset, int64_t g, __m256* s0, __m256* s1, __m256* o0, __m256* o1) {
  *s0 = _mm256_loadu_ps(scale + g * NP);
  *s1 = _mm256_loadu_ps(scale + g * NP + 8);
  *o0 = BITS == 4 ? _mm256_loadu_ps(offset + g * NP) : _mm256_setzero_ps();
  *o1 = BITS == 4 ? _mm256_loadu_ps(offset + g * NP + 8) : _mm256_setzero_ps();
}

/* The 16 weights of panel row k, its group's scale read for this row alone. */
static inline __attribute__((always_inline)) void weights(const int BITS, const uint8_t* codes,
    const float* scale, const float* offset, int64_t k, __m256* w0, __m256* w1) {
  __m256 s0, s1, o0, o1;
  group_scale(BITS, scale, offset, BITS == 4 ? k >> 5 : k >> 4, &s0, &s1, &o0, &o1);
  decode16(BITS, codes, k, s0, s1, o0, o1, w0, w1);
}

static inline __attribute__((always_inline)) void direct(const int BITS, const int R, const int Q,
    const float* A, int64_t K, const uint8_t* codes, const float* scale, const float* offset,
    int64_t cstride, int64_t sstride, float* C, int64_t ldc) {
  __m256 acc[4][4][2];
#pragma GCC unroll 16
  for (int r = 0; r < R; r++)
#pragma GCC unroll 16
    for (int q = 0; q < Q; q++) acc[r][q][0] = acc[r][q][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; k++) {
    __m256 a[4];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) a[r] = _mm256_broadcast_ss(A + r * K + k);
#pragma GCC unroll 16
    for (int q = 0; q < Q; q++) {
      __m256 w0, w1;
      weights(BITS, codes + q * cstride, scale + q * sstride, offset + q * sstride, k, &w0, &w1);
#pragma GCC unroll 16
      for (int r = 0; r < R; r++) {
        acc[r][q][0] = _mm256_fmadd_ps(a[r], w0, acc[r][q][0]);
        acc[r][q][1] = _mm256_fmadd_ps(a[r], w1, acc[r][q][1]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; r++)
#pragma GCC unroll 16
    for (int q = 0; q < Q; q++) {
      _mm256_storeu_ps(C + r * ldc + q * NP, acc[r][q][0]);
      _mm256_storeu_ps(C + r * ldc + q * NP + 8, acc[r][q][1]);
    }
}

static inline __attribute__((always_inline)) void tile(const int R, const float* A, int64_t lda,
    const float* buf, int64_t kc, float* C, int64_t ldc, int first) {
  __m256 acc[MB][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
    if (first) { acc[r][0] = _mm256_setzero_ps(); acc[r][1] = _mm256_setzero_ps(); }
    else { acc[r][0] = _mm256_loadu_ps(C + r * ldc); acc[r][1] = _mm256_loadu_ps(C + r * ldc + 8); }
  }
  for (int64_t k = 0; k < kc; k++) {
    const __m256 w0 = _mm256_load_ps(buf + k * 16), w1 = _mm256_load_ps(buf + k * 16 + 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const __m256 a = _mm256_broadcast_ss(A + r * lda + k);
      acc[r][0] = _mm256_fmadd_ps(a, w0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(a, w1, acc[r][1]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
    _mm256_storeu_ps(C + r * ldc, acc[r][0]);
    _mm256_storeu_ps(C + r * ldc + 8, acc[r][1]);
  }
}

/* Decode kc values of k (a whole number of groups) from k0 into buf, scale and offset held in
   registers for each group. */
static inline __attribute__((always_inline)) void decode_chunk(const int BITS, const uint8_t* codes,
    const float* scale, const float* offset, int64_t k0, int64_t kc, float* buf) {
  const int GS = BITS == 4 ? 32 : 16;
  for (int64_t g0 = 0; g0 < kc; g0 += GS) {
    __m256 s0, s1, o0, o1;
    group_scale(BITS, scale, offset, (k0 + g0) / GS, &s0, &s1, &o0, &o1);
    float* b = buf + g0 * 16;
#pragma GCC unroll 4
    for (int kk = 0; kk < GS; kk++) {
      __m256 w0, w1;
      decode16(BITS, codes, k0 + g0 + kk, s0, s1, o0, o1, &w0, &w1);
      _mm256_store_ps(b + kk * 16, w0);
      _mm256_store_ps(b + kk * 16 + 8, w1);
    }
  }
}

static inline __attribute__((always_inline)) void buffered(const int BITS, const float* A,
    int64_t M, int64_t K, const uint8_t* codes, const float* scale, const float* offset,
    float* C, int64_t ldc) {
  float buf[KC * NP] __attribute__((aligned(64)));
  for (int64_t k0 = 0; k0 < K; k0 += KC) {
    const int64_t kc = K - k0 < KC ? K - k0 : KC;
    decode_chunk(BITS, codes, scale, offset, k0, kc, buf);
    /* the tiles below leave the memory bus idle: start reading the next chunk's codes */
    if (k0 + KC < K) {
      const int64_t bytes = (K - k0 - KC < KC ? K - k0 - KC : KC) * BITS * 2;
      for (int64_t b = 0; b < bytes; b += 64)
        _mm_prefetch((const char*)(codes + (k0 + KC) * BITS * 2 + b), _MM_HINT_T0);
    }
    for (int64_t m = 0; m < M; m += MB) {
      const float* a = A + m * K + k0;
      float* c = C + m * ldc;
      switch (M - m < MB ? M - m : MB) {
        case 1: tile(1, a, K, buf, kc, c, ldc, k0 == 0); break;
        case 2: tile(2, a, K, buf, kc, c, ldc, k0 == 0); break;
        case 3: tile(3, a, K, buf, kc, c, ldc, k0 == 0); break;
        case 4: tile(4, a, K, buf, kc, c, ldc, k0 == 0); break;
        case 5: tile(5, a, K, buf, kc, c, ldc, k0 == 0); break;
        default: tile(6, a, K, buf, kc, c, ldc, k0 == 0); break;
      }
    }
  }
}

static inline __attribute__((always_inline)) void gemm(const int BITS, const float* A, int64_t M,
    int64_t K, const uint8_t* codes, const float* scale, const float* offset, float* C, int64_t N,
    int nthreads) {
  const int64_t P = N / NP;
  const int64_t cstride = K * BITS * 2, sstride = (K / (BITS == 4 ? 32 : 16)) * NP;
  const int Q = M == 1 ? 4 : M == 2 ? 2 : 1;
  const int64_t PQ = (P + Q - 1) / Q;
#pragma omp parallel for schedule(static) num_threads(nthreads)
  for (int64_t pq = 0; pq < PQ; pq++) {
    const int64_t p = pq * Q, n = P - p < Q ? P - p : Q;
    const uint8_t* c = codes + p * cstride;
    const float* s = scale + p * sstride;
    const float* o = offset ? offset + p * sstride : NULL;
    float* y = C + p * NP;
    if (M == 1) {
      switch (n) {
        case 4: direct(BITS, 1, 4, A, K, c, s, o, cstride, sstride, y, N); break;
        case 3: direct(BITS, 1, 3, A, K, c, s, o, cstride, sstride, y, N); break;
        case 2: direct(BITS, 1, 2, A, K, c, s, o, cstride, sstride, y, N); break;
        default: direct(BITS, 1, 1, A, K, c, s, o, cstride, sstride, y, N); break;
      }
    } else if (M == 2) {
      if (n == 2) direct(BITS, 2, 2, A, K, c, s, o, cstride, sstride, y, N);
      else direct(BITS, 2, 1, A, K, c, s, o, cstride, sstride, y, N);
    } else if (M == 3) {
      direct(BITS, 3, 1, A, K, c, s, o, cstride, sstride, y, N);
    } else if (M == 4) {
      direct(BITS, 4, 1, A, K, c, s, o, cstride, sstride, y, N);
    } else {
      buffered(BITS, A, M, K, c, s, o, y, N);
    }
  }
}

void q4_gemm(const float* A, int64_t M, int64_t K, const uint8_t* codes, const float* scale,
             const float* offset, float* C, int64_t N, int nthreads) {
  gemm(4, A, M, K, codes, scale, offset, C, N, nthreads);
}

void q8_gemm(const float* A, int64_t M, int64_t K, const uint8_t* codes, const float* scale,
             float* C, int64_t N, int nthreads) {
  gemm(8, A, M, K, codes, scale, NULL, C, N, nthreads);
}

/* One row, 4-bit, for a draft's layers only: the codes times x summed over each group of 32
   first, the group's scale and offset applied once after,
     y[n] = sum_g ( scale[g,n] * sum_{k in g} code[k,n] * x[k]  -  offset[g,n] * xsum[g] ),
   with xsum[g] = sum_{k in g} x[k]. Per 16 weights that is a convert and an FMA instead of a
   convert, a multiply-subtract and an FMA, and no per-row scale loads. The rounding is not the
   exact path's, and a row's result depends on this path being taken: a draft's numbers are
   free (the target verifies what the draft sampled from), the target's are not. */
static inline __attribute__((always_inline)) void grouped_row(const int Q, const float* x,
    const float* xsum, int64_t K, const uint8_t* codes, const float* scale, const float* offset,
    int64_t cstride, int64_t sstride, float* y) {
  __m256 acc[4][2];
#pragma GCC unroll 4
  for (int q = 0; q < Q; q++) acc[q][0] = acc[q][1] = _mm256_setzero_ps();
  for (int64_t g = 0; g < K / 32; g++) {
    __m256 part[4][2];
#pragma GCC unroll 4
    for (int q = 0; q < Q; q++) part[q][0] = part[q][1] = _mm256_setzero_ps();
#pragma GCC unroll 4
    for (int kk = 0; kk < 32; kk++) {
      const int64_t k = g * 32 + kk;
      const __m256 a = _mm256_broadcast_ss(x + k);
#pragma GCC unroll 4
      for (int q = 0; q < Q; q++) {
        __m256 c0, c1;
        codes4(codes + q * cstride + k * 8, &c0, &c1);
        part[q][0] = _mm256_fmadd_ps(c0, a, part[q][0]);
        part[q][1] = _mm256_fmadd_ps(c1, a, part[q][1]);
      }
    }
    const __m256 xs = _mm256_broadcast_ss(xsum + g);
#pragma GCC unroll 4
    for (int q = 0; q < Q; q++) {
      const float* s = scale + q * sstride + g * NP;
      const float* o = offset + q * sstride + g * NP;
      acc[q][0] = _mm256_fnmadd_ps(_mm256_loadu_ps(o), xs, _mm256_fmadd_ps(part[q][0], _mm256_loadu_ps(s), acc[q][0]));
      acc[q][1] = _mm256_fnmadd_ps(_mm256_loadu_ps(o + 8), xs, _mm256_fmadd_ps(part[q][1], _mm256_loadu_ps(s + 8), acc[q][1]));
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < Q; q++) {
    _mm256_storeu_ps(y + q * NP, acc[q][0]);
    _mm256_storeu_ps(y + q * NP + 8, acc[q][1]);
  }
}

void q4_gemv_grouped(const float* x, int64_t K, const uint8_t* codes, const float* scale,
                     const float* offset, float* y, int64_t N, int nthreads) {
  const int64_t P = N / NP, PQ = (P + 3) / 4;
  const int64_t cstride = K * 8, sstride = (K / 32) * NP;
  float xsum[K / 32 > 0 ? K / 32 : 1];
  for (int64_t g = 0; g < K / 32; g++) {
    float s = 0.0f;
    for (int kk = 0; kk < 32; kk++) s += x[g * 32 + kk];
    xsum[g] = s;
  }
#pragma omp parallel for schedule(static) num_threads(nthreads)
  for (int64_t pq = 0; pq < PQ; pq++) {
    const int64_t p = pq * 4, n = P - p < 4 ? P - p : 4;
    const uint8_t* c = codes + p * cstride;
    const float* s = scale + p * sstride;
    const float* o = offset + p * sstride;
    switch (n) {
      case 4: grouped_row(4, x, xsum, K, c, s, o, cstride, sstride, y + p * NP); break;
      case 3: grouped_row(3, x, xsum, K, c, s, o, cstride, sstride, y + p * NP); break;
      case 2: grouped_row(2, x, xsum, K, c, s, o, cstride, sstride, y + p * NP); break;
      default: grouped_row(1, x, xsum, K, c, s, o, cstride, sstride, y + p * NP); break;
    }
  }
}
