/* GGUF blocks x 8-bit activations: the matmul of every linear layer.

   A weight row is read block by block; each block is "prepared" once (codes unpacked to one
   unsigned byte per weight, scales widened) into a small buffer, then every activation row of
   the pass takes its integer dot product against it. So a verification of k+1 rows reads each
   weight from memory once, and the per-row work is integer multiply-adds.

   The lean forward's matrices are interleaved at load (sdcpu.h, "x8"): 8 weight rows side by
   side, each output row in its own SIMD lane, so an extra activation row costs a broadcast and
   the multiply-adds of 32 codes of 8 rows per register, with int16 sums over a whole scale unit
   (x8_x86.h, x8_neon.h). The numbers below do not depend on the layout: integer sums are
   exact in any order, and each float step is taken lane by lane in the order given here.

   What a row's result is (every build, every pass size, every thread count):
   - K-quants (Q4_K, Q5_K, Q6_K), activations in blocks of 256 with scale dx:
       S1 = sum over groups g of 16: sc[g] * sum q*x,   S2 = sum over g: mn[g] * sum x   (int32)
       Q4_K / Q5_K:  acc = acc + (d*dx) * S1;  acc = acc - (dmin*dx) * S2
       Q6_K:         acc = acc + (d*dx) * (S1 - 32*S2)
     over the super-blocks in order, acc from +0.0;
   - 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), activations in blocks of 32:
       S = sum q*x - off * X  (X = sum x; off 8 for Q4_0, 16 for Q5_0, 0 otherwise; Q8_0: q signed)
       t = (d*dx) * S  [Q4_1, Q5_1: t = t + (m*dx) * X]
     block b adds t into lane b mod 8, the lanes combined by the tree8 order (sdcpu.h);
   - F32 / F16 / BF16 weights: float activations, tree8 dot of x and the weight row.
   Every (float) above is one rounding of an exact integer; every * and + one IEEE operation. */
#include "sdcpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__AVX2__)
#include <immintrin.h>
#define SD_X86 1
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#define SD_ARM 1
#endif

/* ------------------------------------------------------------------ scalars and formats */

void* sd_alloc(size_t n) {
#if defined(_WIN32)
  return _aligned_malloc(n ? n : 1, 64);
#else
  void* p = NULL;
  return posix_memalign(&p, 64, n ? n : 1) == 0 ? p : NULL;
#endif
}

void sd_free(void* p) {
#if defined(_WIN32)
  _aligned_free(p);
#else
  free(p);
#endif
}

float sd_fp16_to_fp32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13); /* inf / nan */
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { /* subnormal half: normalise */
    exp = 113;
    while (!(man & 0x400)) { man <<= 1; exp--; }
    bits = sign | (exp << 23) | ((man & 0x3FF) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

SD_INLINE float bf16_to_fp32(uint16_t h) {
  const uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Q4_K / Q5_K's 6-bit scale and min of sub-block j (llama.cpp's get_scale_min_k4) */
SD_INLINE void scale_min_k4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/* ------------------------------------------------------------------ dequantizing (lookups, tests)
   The values gguf-py's dequantize gives, bit for bit (each * and - one rounding, in its order).
   One function per type, K elements of a row (whole blocks). */

static void deq_f32(const void* row, int64_t K, float* y) { memcpy(y, row, (size_t)K * 4); }

static void deq_f16(const void* row, int64_t K, float* y) {
  for (int64_t i = 0; i < K; i++) y[i] = sd_fp16_to_fp32(((const uint16_t*)row)[i]);
}

static void deq_bf16(const void* row, int64_t K, float* y) {
  for (int64_t i = 0; i < K; i++) y[i] = bf16_to_fp32(((const uint16_t*)row)[i]);
}

static void deq_q4_0(const void* row, int64_t K, float* y) {
  for (const blk_q4_0* b = row; K > 0; b++, K -= QK, y += QK) {
    const float d = sd_fp16_to_fp32(b->d);
    for (int j = 0; j < 16; j++) {
      y[j] = d * (float)((b->qs[j] & 0xF) - 8);
      y[j + 16] = d * (float)((b->qs[j] >> 4) - 8);
    }
  }
}

static void deq_q4_1(const void* row, int64_t K, float* y) {
  for (const blk_q4_1* b = row; K > 0; b++, K -= QK, y += QK) {
    const float d = sd_fp16_to_fp32(b->d), m = sd_fp16_to_fp32(b->m);
    for (int j = 0; j < 16; j++) {
      y[j] = d * (float)(b->qs[j] & 0xF) + m;
      y[j + 16] = d * (float)(b->qs[j] >> 4) + m;
    }
  }
}

/* Q5_0 / Q5_1: the 32 codes of a block, the fifth bits from qh */
SD_INLINE void q5_codes(const uint8_t* qs, const uint8_t* qh8, int* lo, int* hi) {
  const uint32_t qh = (uint32_t)qh8[0] | ((uint32_t)qh8[1] << 8) | ((uint32_t)qh8[2] << 16) | ((uint32_t)qh8[3] << 24);
  for (int j = 0; j < 16; j++) {
    lo[j] = (qs[j] & 0xF) | (((qh >> j) & 1) << 4);
    hi[j] = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
  }
}

static void deq_q5_0(const void* row, int64_t K, float* y) {
  for (const blk_q5_0* b = row; K > 0; b++, K -= QK, y += QK) {
    const float d = sd_fp16_to_fp32(b->d);
    int lo[16], hi[16];
    q5_codes(b->qs, b->qh, lo, hi);
    for (int j = 0; j < 16; j++) {
      y[j] = d * (float)(lo[j] - 16);
      y[j + 16] = d * (float)(hi[j] - 16);
    }
  }
}

static void deq_q5_1(const void* row, int64_t K, float* y) {
  for (const blk_q5_1* b = row; K > 0; b++, K -= QK, y += QK) {
    const float d = sd_fp16_to_fp32(b->d), m = sd_fp16_to_fp32(b->m);
    int lo[16], hi[16];
    q5_codes(b->qs, b->qh, lo, hi);
    for (int j = 0; j < 16; j++) {
      y[j] = d * (float)lo[j] + m;
      y[j + 16] = d * (float)hi[j] + m;
    }
  }
}

static void deq_q8_0(const void* row, int64_t K, float* y) {
  for (const blk_q8_0* b = row; K > 0; b++, K -= QK, y += QK) {
    const float d = sd_fp16_to_fp32(b->d);
    for (int j = 0; j < QK; j++) y[j] = d * (float)b->qs[j];
  }
}

/* Q4_K and Q5_K: qh NULL for Q4_K */
SD_INLINE void deq_k45(uint16_t dh, uint16_t dminh, const uint8_t* sc, const uint8_t* qs, const uint8_t* qh, float* y) {
  const float d = sd_fp16_to_fp32(dh), dmin = sd_fp16_to_fp32(dminh);
  for (int c = 0; c < 4; c++) {
    for (int half = 0; half < 2; half++) {
      int s, m;
      scale_min_k4(2 * c + half, sc, &s, &m);
      const float d1 = d * (float)s, m1 = dmin * (float)m;
      for (int l = 0; l < 32; l++) {
        int q = half ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 0xF;
        if (qh) q |= ((qh[l] >> (2 * c + half)) & 1) << 4;
        *y++ = d1 * (float)q - m1;
      }
    }
  }
}

static void deq_q4_K(const void* row, int64_t K, float* y) {
  for (const blk_q4_K* b = row; K > 0; b++, K -= QKK, y += QKK) deq_k45(b->d, b->dmin, b->scales, b->qs, NULL, y);
}

static void deq_q5_K(const void* row, int64_t K, float* y) {
  for (const blk_q5_K* b = row; K > 0; b++, K -= QKK, y += QKK) deq_k45(b->d, b->dmin, b->scales, b->qs, b->qh, y);
}

static void deq_q6_K(const void* row, int64_t K, float* y) {
  for (const blk_q6_K* b = row; K > 0; b++, K -= QKK) {
    const float d = sd_fp16_to_fp32(b->d);
    for (int half = 0; half < 2; half++, y += 128) {
      const uint8_t* ql = b->ql + 64 * half;
      const uint8_t* qh = b->qh + 32 * half;
      const int8_t* sc = b->scales + 8 * half;
      for (int l = 0; l < 32; l++) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * (float)sc[is] * (float)q1;
        y[l + 32] = d * (float)sc[is + 2] * (float)q2;
        y[l + 64] = d * (float)sc[is + 4] * (float)q3;
        y[l + 96] = d * (float)sc[is + 6] * (float)q4;
      }
    }
  }
}

/* What the kernel knows of each type (ggml's type_traits, for the types it reads): elements and
   bytes per block, the activation block it takes (256, 32, or 0: float activations), whether
   it has an interleaved layout, and its dequantizer. */
typedef struct {
  int elems, bytes, act_blk, x8;
  void (*dequantize)(const void* row, int64_t K, float* y);
} type_traits;

static const type_traits* traits(int type) {
  static const type_traits t_f32 = {1, 4, 0, 0, deq_f32}, t_f16 = {1, 2, 0, 0, deq_f16}, t_bf16 = {1, 2, 0, 0, deq_bf16},
                           t_q4_0 = {QK, sizeof(blk_q4_0), QK, 1, deq_q4_0}, t_q4_1 = {QK, sizeof(blk_q4_1), QK, 0, deq_q4_1},
                           t_q5_0 = {QK, sizeof(blk_q5_0), QK, 1, deq_q5_0}, t_q5_1 = {QK, sizeof(blk_q5_1), QK, 0, deq_q5_1},
                           t_q8_0 = {QK, sizeof(blk_q8_0), QK, 1, deq_q8_0},
                           t_q4_K = {QKK, sizeof(blk_q4_K), QKK, 1, deq_q4_K}, t_q5_K = {QKK, sizeof(blk_q5_K), QKK, 0, deq_q5_K},
                           t_q6_K = {QKK, sizeof(blk_q6_K), QKK, 1, deq_q6_K};
  switch (type) {
    case SD_F32: return &t_f32;
    case SD_F16: return &t_f16;
    case SD_BF16: return &t_bf16;
    case SD_Q4_0: return &t_q4_0;
    case SD_Q4_1: return &t_q4_1;
    case SD_Q5_0: return &t_q5_0;
    case SD_Q5_1: return &t_q5_1;
    case SD_Q8_0: return &t_q8_0;
    case SD_Q4_K: return &t_q4_K;
    case SD_Q5_K: return &t_q5_K;
    case SD_Q6_K: return &t_q6_K;
    default: return NULL;
  }
}

int sd_blk_elems(int type) { return traits(type) ? traits(type)->elems : 0; }
int sd_blk_bytes(int type) { return traits(type) ? traits(type)->bytes : 0; }
int sd_act_blk(int type) { return traits(type) ? traits(type)->act_blk : 0; }
int sd_x8_type(int type) { return traits(type) ? traits(type)->x8 : 0; }
SD_EXPORT int sd_type_supported(int type) { return traits(type) != NULL; }
SD_EXPORT int sd_x8_supported(int type) { return sd_x8_type(type); }

SD_EXPORT int sd_abi_layout(int64_t* out, int n) {
#define L(x) (int64_t)(x)
  const int64_t v[] = {
      L(sizeof(sd_mat)), L(offsetof(sd_mat, row_bytes)), L(offsetof(sd_mat, type)), L(offsetof(sd_mat, layout)),
      L(sizeof(sd_layer)), L(offsetof(sd_layer, wq)), L(offsetof(sd_layer, wdown)), L(offsetof(sd_layer, bq)),
      L(offsetof(sd_layer, k_norm)),
      L(sizeof(sd_model)), L(offsetof(sd_model, rms_eps)), L(offsetof(sd_model, inv_freq)), L(offsetof(sd_model, tok_embd)),
      L(offsetof(sd_model, output)), L(offsetof(sd_model, output_norm)), L(offsetof(sd_model, layers))};
#undef L
  const int k = (int)(sizeof v / sizeof v[0]);
  for (int i = 0; i < n && i < k; i++) out[i] = v[i];
  return k;
}
/* 1 where this build multiplies x8 matrices with kernels of their own; 0 where it unpacks each
   row for the row kernel (right, but slower than the file's rows: the loader keeps those) */
SD_EXPORT int sd_x8_native(void) {
#if SD_X86 || SD_ARM
  return 1;
#else
  return 0;
#endif
}

void sd_dequantize_row(int type, const void* row, int64_t K, float* y) { traits(type)->dequantize(row, K, y); }

/* ------------------------------------------------------------------ tree8 float sums */

SD_INLINE float tree8(const float l[8]) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

#if SD_X86
SD_INLINE float tree8_v(__m256 v) {
  /* hi+lo halves: (l0+l4, l1+l5, l2+l6, l3+l7); then (l0+l4)+(l2+l6), (l1+l5)+(l3+l7); then their sum */
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#elif SD_ARM
SD_INLINE float tree8_v(float32x4_t lo, float32x4_t hi) {
  const float32x4_t s = vaddq_f32(lo, hi);                       /* l0+l4 .. l3+l7 */
  const float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s)); /* (l0+l4)+(l2+l6), (l1+l5)+(l3+l7) */
  return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}
#endif

float sd_tree8_dot(const float* a, const float* b, int64_t n) {
  const int64_t n8 = n & ~(int64_t)7;
  float r;
#if SD_X86
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n8; i += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  r = tree8_v(acc);
#elif SD_ARM
  float32x4_t lo = vdupq_n_f32(0.0f), hi = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < n8; i += 8) {
    lo = vaddq_f32(lo, vmulq_f32(vld1q_f32(a + i), vld1q_f32(b + i)));
    hi = vaddq_f32(hi, vmulq_f32(vld1q_f32(a + i + 4), vld1q_f32(b + i + 4)));
  }
  r = tree8_v(lo, hi);
#else
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n8; i += 8)
    for (int j = 0; j < 8; j++) l[j] = l[j] + a[i + j] * b[i + j];
  r = tree8(l);
#endif
  for (int64_t i = n8; i < n; i++) r = r + a[i] * b[i];
  return r;
}

float sd_tree8_sumsq(const float* a, int64_t n) { return sd_tree8_dot(a, a, n); }

/* ------------------------------------------------------------------ e^x
   Cephes' expf: x = n ln2 + r, e^r = 1 + r + r^2 * P(r) (degree 5, Horner), times 2^n through
   the exponent bits. Each step is one IEEE multiply or add, so scalar and SIMD agree. Inputs are
   clamped to [-87.3, 88.3]: softmax and SiLU never need more (e^-87.3 ~ 1e-38). */
#define EXP_HI 88.3f
#define EXP_LO -87.3f
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500e-4f
#define P1 1.3981999507e-3f
#define P2 8.3334519073e-3f
#define P3 4.1665795894e-2f
#define P4 1.6666665459e-1f
#define P5 5.0000001201e-1f

SD_INLINE float exp_ref(float x) {
  x = x > EXP_HI ? EXP_HI : x;
  x = x < EXP_LO ? EXP_LO : x;
  const float n = nearbyintf(x * LOG2E);
  float r = x - n * LN2_HI;
  r = r - n * LN2_LO;
  const float z = r * r;
  float p = P0 * r + P1;
  p = p * r + P2;
  p = p * r + P3;
  p = p * r + P4;
  p = p * r + P5;
  p = p * z + r;
  p = p + 1.0f;
  const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
  float scale;
  memcpy(&scale, &bits, 4);
  return p * scale;
}

void sd_exp_inplace(float* x, int64_t n) {
  int64_t i = 0;
#if SD_X86
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    v = _mm256_min_ps(v, _mm256_set1_ps(EXP_HI));
    v = _mm256_max_ps(v, _mm256_set1_ps(EXP_LO));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_sub_ps(v, _mm256_mul_ps(k, _mm256_set1_ps(LN2_HI)));
    r = _mm256_sub_ps(r, _mm256_mul_ps(k, _mm256_set1_ps(LN2_LO)));
    const __m256 z = _mm256_mul_ps(r, r);
    __m256 p = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(P0), r), _mm256_set1_ps(P1));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(P2));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(P3));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(P4));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(P5));
    p = _mm256_add_ps(_mm256_mul_ps(p, z), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    _mm256_storeu_ps(x + i, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }
#elif SD_ARM
  for (; i + 4 <= n; i += 4) {
    float32x4_t v = vld1q_f32(x + i);
    v = vminq_f32(v, vdupq_n_f32(EXP_HI));
    v = vmaxq_f32(v, vdupq_n_f32(EXP_LO));
    const float32x4_t k = vrndnq_f32(vmulq_f32(v, vdupq_n_f32(LOG2E)));
    float32x4_t r = vsubq_f32(v, vmulq_f32(k, vdupq_n_f32(LN2_HI)));
    r = vsubq_f32(r, vmulq_f32(k, vdupq_n_f32(LN2_LO)));
    const float32x4_t z = vmulq_f32(r, r);
    float32x4_t p = vaddq_f32(vmulq_f32(vdupq_n_f32(P0), r), vdupq_n_f32(P1));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(P2));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(P3));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(P4));
    p = vaddq_f32(vmulq_f32(p, r), vdupq_n_f32(P5));
    p = vaddq_f32(vmulq_f32(p, z), r);
    p = vaddq_f32(p, vdupq_n_f32(1.0f));
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(k), vdupq_n_s32(127)), 23);
    vst1q_f32(x + i, vmulq_f32(p, vreinterpretq_f32_s32(e)));
  }
#endif
  for (; i < n; i++) x[i] = exp_ref(x[i]);
}

SD_EXPORT void sd_exp(float* x, int64_t n) { sd_exp_inplace(x, n); }

/* ------------------------------------------------------------------ quantizing activations */

SD_INLINE int8_t round_code(float v) {
  float r = nearbyintf(v);
  r = r > 127.0f ? 127.0f : r < -127.0f ? -127.0f : r;
  return (int8_t)(r == r ? (int)r : 0);
}

/* one block of n (32 or 256) values -> codes, scale, sums of 16 */
SD_INLINE void quantize_block(const float* x, int n, int8_t* q, float* d, int16_t* sums) {
#if SD_X86
  __m256 amax = _mm256_setzero_ps();
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int i = 0; i < n; i += 8) amax = _mm256_max_ps(amax, _mm256_and_ps(_mm256_loadu_ps(x + i), abs_mask));
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float am = _mm_cvtss_f32(m4);
  *d = am / 127.0f;
  const __m256 id = _mm256_set1_ps(am != 0.0f ? 127.0f / am : 0.0f);
  for (int i = 0; i < n; i += 32) {
    __m256i v[4];
    for (int j = 0; j < 4; j++) {
      const __m256 s = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * j), id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      v[j] = _mm256_cvtps_epi32(s);
    }
    /* pack 32 int32 -> 32 int8 in order (the packs interleave 128-bit lanes: permute back) */
    const __m256i p01 = _mm256_packs_epi32(v[0], v[1]), p23 = _mm256_packs_epi32(v[2], v[3]);
    __m256i p = _mm256_packs_epi16(p01, p23);
    p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i*)(q + i), p);
    /* sums of each 16: widen to int16 and add pairs down */
    const __m256i w0 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(p));
    const __m256i w1 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(p, 1));
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i s0 = _mm256_madd_epi16(w0, ones), s1 = _mm256_madd_epi16(w1, ones); /* 8 int32 each */
    __m256i h = _mm256_hadd_epi32(s0, s1); /* (s0 01,23, s1 01,23 | s0 45,67, s1 45,67) */
    h = _mm256_hadd_epi32(h, h);           /* (s0 0-3, s1 0-3, .. | s0 4-7, s1 4-7, ..) */
    const int32_t a0 = _mm256_extract_epi32(h, 0), a1 = _mm256_extract_epi32(h, 1);
    const int32_t b0 = _mm256_extract_epi32(h, 4), b1 = _mm256_extract_epi32(h, 5);
    sums[i / 16] = (int16_t)(a0 + b0);
    sums[i / 16 + 1] = (int16_t)(a1 + b1);
  }
#elif SD_ARM
  float32x4_t amax = vdupq_n_f32(0.0f);
  for (int i = 0; i < n; i += 4) amax = vmaxq_f32(amax, vabsq_f32(vld1q_f32(x + i)));
  const float am = vmaxvq_f32(amax);
  *d = am / 127.0f;
  const float32x4_t id = vdupq_n_f32(am != 0.0f ? 127.0f / am : 0.0f);
  for (int i = 0; i < n; i += 16) {
    int32x4_t v[4];
    for (int j = 0; j < 4; j++) v[j] = vcvtq_s32_f32(vrndnq_f32(vmulq_f32(vld1q_f32(x + i + 4 * j), id)));
    const int16x8_t h0 = vcombine_s16(vqmovn_s32(v[0]), vqmovn_s32(v[1]));
    const int16x8_t h1 = vcombine_s16(vqmovn_s32(v[2]), vqmovn_s32(v[3]));
    const int8x16_t b = vcombine_s8(vqmovn_s16(h0), vqmovn_s16(h1));
    vst1q_s8(q + i, b);
    sums[i / 16] = (int16_t)vaddlvq_s8(b);
  }
#else
  float am = 0.0f;
  for (int i = 0; i < n; i++) {
    const float a = fabsf(x[i]);
    am = a > am ? a : am;
  }
  *d = am / 127.0f;
  const float id = am != 0.0f ? 127.0f / am : 0.0f;
  for (int i = 0; i < n; i++) q[i] = round_code(x[i] * id);
  for (int g = 0; g < n / 16; g++) {
    int s = 0;
    for (int i = 0; i < 16; i++) s += q[16 * g + i];
    sums[g] = (int16_t)s;
  }
#endif
}

/* rows [0, M) of x [M, K] into out's rows row0.. */
void sd_quantize_rows(const float* x, int64_t M, int64_t K, int blk, sd_act* out, int64_t row0) {
  const int64_t nb = K / blk;
  for (int64_t m = 0; m < M; m++) {
    const int64_t r = row0 + m;
    for (int64_t b = 0; b < nb; b++)
      quantize_block(x + m * K + b * blk, blk, out->qs + r * K + b * blk, out->d + r * nb + b,
                     out->sums + r * (K / 16) + b * (blk / 16));
  }
}

SD_EXPORT void sd_quantize_act(const float* x, int64_t M, int64_t K, int blk, int8_t* qs, float* d, int16_t* sums) {
  sd_act a = {qs, d, sums, K, blk};
  sd_quantize_rows(x, M, K, blk, &a, 0);
}

/* ------------------------------------------------------------------ the row kernels
   mm_row_k (K-quants) and mm_row_b (32-element blocks): one weight row against rows [0, M) of
   the activations (M <= SD_MB), into y[m * ldy]. One implementation per instruction set, each
   computing the numbers this file's header defines. */
#if SD_X86
#include "dot_x86.h"
#elif SD_ARM
#include "dot_neon.h"
#else
#include "dot_portable.h"
#endif

/* ------------------------------------------------------------------ interleaved layouts (x8)
   One x8 block <-> the 8 row blocks it holds, both ways through the same byte map (so a repack
   and its inverse cannot disagree). Q4_K's scales are re-encoded in the same 96 bits: the low
   nibbles of scale | min, [j][row], then their top two bits, byte [j%4][row] holding scale and
   min of sub-block j (bits 0-3) and of j+4 (bits 4-7): a few vector ands and shifts unpack
   them for 8 rows at once. Q5_0's fifth bits are transposed for the same reason (sdcpu.h). */

#define X8_MOVE(x8p, rowp, n) (to_x8 ? memcpy((x8p), (rowp), (n)) : memcpy((rowp), (x8p), (n)))

static void x8_block(int type, uint8_t* const blocks[8], uint8_t* x8, int to_x8) {
  switch (type) {
    case SD_Q4_K: {
      x8_q4_K* x = (x8_q4_K*)x8;
      int sc[8][8], mn[8][8]; /* [row][j] */
      if (!to_x8) {
        for (int r = 0; r < 8; r++)
          for (int j = 0; j < 8; j++) {
            const int lo = x->scales[8 * j + r], hi = x->scales[64 + 8 * (j & 3) + r] >> (j < 4 ? 0 : 4);
            sc[r][j] = (lo & 15) | ((hi & 3) << 4);
            mn[r][j] = (lo >> 4) | (((hi >> 2) & 3) << 4);
          }
      } else {
        memset(x->scales, 0, sizeof x->scales);
      }
      for (int r = 0; r < 8; r++) {
        blk_q4_K* b = (blk_q4_K*)blocks[r];
        X8_MOVE(&x->d[r], &b->d, 2);
        X8_MOVE(&x->dmin[r], &b->dmin, 2);
        for (int c = 0; c < 4; c++)
          for (int k = 0; k < 8; k++) X8_MOVE(x->qs + (c * 8 + k) * 32 + 4 * r, b->qs + 32 * c + 4 * k, 4);
        if (to_x8) {
          for (int j = 0; j < 8; j++) {
            int s, m;
            scale_min_k4(j, b->scales, &s, &m);
            x->scales[8 * j + r] = (uint8_t)((s & 15) | ((m & 15) << 4));
            x->scales[64 + 8 * (j & 3) + r] |= (uint8_t)(((s >> 4) | ((m >> 4) << 2)) << (j < 4 ? 0 : 4));
          }
        } else { /* get_scale_min_k4's packing, inverted */
          for (int j = 0; j < 4; j++) {
            b->scales[j] = (uint8_t)(sc[r][j] | ((sc[r][j + 4] >> 4) << 6));
            b->scales[j + 4] = (uint8_t)(mn[r][j] | ((mn[r][j + 4] >> 4) << 6));
            b->scales[j + 8] = (uint8_t)((sc[r][j + 4] & 15) | ((mn[r][j + 4] & 15) << 4));
          }
        }
      }
      return;
    }
    case SD_Q6_K: {
      x8_q6_K* x = (x8_q6_K*)x8;
      for (int r = 0; r < 8; r++) {
        blk_q6_K* b = (blk_q6_K*)blocks[r];
        for (int h = 0; h < 2; h++)
          for (int k = 0; k < 8; k++) {
            for (int p = 0; p < 2; p++) X8_MOVE(x->ql + ((2 * h + p) * 8 + k) * 32 + 4 * r, b->ql + 64 * h + 32 * p + 4 * k, 4);
            X8_MOVE(x->qh + (h * 8 + k) * 32 + 4 * r, b->qh + 32 * h + 4 * k, 4);
          }
        for (int g = 0; g < 16; g++) X8_MOVE(&x->scales[8 * g + r], &b->scales[g], 1);
        X8_MOVE(&x->d[r], &b->d, 2);
      }
      return;
    }
    case SD_Q4_0: case SD_Q5_0: {
      const int five = type == SD_Q5_0;
      uint16_t* d = five ? ((x8_q5_0*)x8)->d : ((x8_q4_0*)x8)->d;
      uint8_t* qs = five ? ((x8_q5_0*)x8)->qs : ((x8_q4_0*)x8)->qs;
      for (int r = 0; r < 8; r++) {
        uint8_t* b = blocks[r];
        X8_MOVE(&d[r], b, 2);
        for (int k = 0; k < 4; k++) X8_MOVE(qs + 32 * k + 4 * r, b + (five ? 6 : 2) + 4 * k, 4);
        if (five) {
          uint8_t* t = ((x8_q5_0*)x8)->qh + 4 * r;
          uint8_t* qh = b + 2;
          if (to_x8) {
            for (int i = 0; i < 4; i++) {
              t[i] = 0;
              for (int c = 0; c < 8; c++) t[i] |= (uint8_t)(((qh[(4 * c + i) / 8] >> ((4 * c + i) % 8)) & 1) << c);
            }
          } else {
            memset(qh, 0, 4);
            for (int i = 0; i < 4; i++)
              for (int c = 0; c < 8; c++) qh[(4 * c + i) / 8] |= (uint8_t)(((t[i] >> c) & 1) << ((4 * c + i) % 8));
          }
        }
      }
      return;
    }
    case SD_Q8_0: {
      x8_q8_0* x = (x8_q8_0*)x8;
      for (int r = 0; r < 8; r++) {
        blk_q8_0* b = (blk_q8_0*)blocks[r];
        X8_MOVE(&x->d[r], &b->d, 2);
        for (int c = 0; c < 8; c++) X8_MOVE(x->qs + 32 * c + 4 * r, b->qs + 4 * c, 4);
      }
      return;
    }
    default: return;
  }
}

/* row n of an x8 matrix in the file's layout (row_bytes) */
static void x8_row(const sd_mat* w, int64_t n, uint8_t* row) {
  const int bb = sd_blk_bytes(w->type);
  const int64_t nb = w->row_bytes / bb, g = n / 8;
  SD_ALIGN(64) uint8_t blocks[8][sizeof(blk_q6_K) + 6];
  uint8_t* ptr[8];
  for (int r = 0; r < 8; r++) ptr[r] = blocks[r];
  for (int64_t b = 0; b < nb; b++) {
    x8_block(w->type, ptr, (uint8_t*)w->data + (g * nb + b) * 8 * bb, 0);
    memcpy(row + b * bb, blocks[n % 8], (size_t)bb);
  }
}

/* rows -> x8 (layout SD_LAYOUT_X8) or x8 -> rows (SD_LAYOUT_ROWS: src is x8), groups across threads */
SD_EXPORT int sd_repack(int type, const void* src, int64_t row_bytes, int64_t rows, int64_t K, void* out, int layout,
                        int nthreads) {
  if (!sd_x8_type(type)) return SD_EUNSUPPORTED;
  const int bb = sd_blk_bytes(type), e = sd_blk_elems(type);
  if (rows % 8 || K % e || row_bytes != K / e * bb) return SD_ESHAPE;
  const int64_t nb = K / e, groups = rows / 8;
  const int to_x8 = layout == SD_LAYOUT_X8;
#pragma omp parallel for schedule(static) num_threads(nthreads > 0 ? nthreads : 1)
  for (int64_t g = 0; g < groups; g++) {
    const uint8_t* in = (const uint8_t*)src + g * 8 * row_bytes;
    uint8_t* o = (uint8_t*)out + g * 8 * row_bytes;
    for (int64_t b = 0; b < nb; b++) {
      uint8_t* ptr[8];
      if (to_x8) {
        for (int r = 0; r < 8; r++) ptr[r] = (uint8_t*)in + r * row_bytes + b * bb;
        x8_block(type, ptr, o + b * 8 * bb, 1);
      } else {
        for (int r = 0; r < 8; r++) ptr[r] = o + r * row_bytes + b * bb;
        x8_block(type, ptr, (uint8_t*)in + b * 8 * bb, 0);
      }
    }
  }
  return 0;
}

/* the x8 matmul: one implementation per instruction set (the portable build unpacks each row
   and takes the row kernel: the same numbers, by construction) */
#if SD_X86
#include "x8_x86.h"
#elif SD_ARM
#include "x8_neon.h"
#else
static int mm_x8(const sd_mat* w, const sd_act* a, int64_t M, int64_t n0, int64_t n1, float* y, int64_t ldy) {
  uint8_t* row = (uint8_t*)sd_alloc((size_t)w->row_bytes);
  if (!row) return SD_ENOMEM;
  for (int64_t n = n0; n < n1; n++) {
    x8_row(w, n, row);
    if (sd_act_blk(w->type) == QKK) mm_row_k(w->type, row, w->cols, a, M, y + n, ldy);
    else mm_row_b(w->type, row, w->cols, a, M, y + n, ldy);
  }
  sd_free(row);
  return 0;
}
#endif

/* ------------------------------------------------------------------ float weights */

static void mm_row_f(int type, const uint8_t* wrow, int64_t K, const float* x, int64_t M, float* y, int64_t ldy, float* wbuf) {
  const float* w = (const float*)wrow;
  if (type != SD_F32) {
#if SD_X86
    if (type == SD_F16) {
      int64_t i = 0;
      for (; i + 8 <= K; i += 8)
        _mm256_storeu_ps(wbuf + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)((const uint16_t*)wrow + i))));
      for (; i < K; i++) wbuf[i] = sd_fp16_to_fp32(((const uint16_t*)wrow)[i]);
    } else
#endif
    sd_dequantize_row(type, wrow, K, wbuf);
    w = wbuf;
  }
  for (int64_t m = 0; m < M; m++) y[m * ldy] = sd_tree8_dot(x + m * K, w, K);
}

/* ------------------------------------------------------------------ matmul */

int sd_mm_rows(const sd_mat* w, const int32_t* rowmap, const sd_act* a, const float* x, int64_t M,
               int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const int blk = sd_act_blk(w->type);
  float* wbuf = NULL;
  if (!blk && w->type != SD_F32 && !(wbuf = (float*)sd_alloc(sizeof(float) * (size_t)w->cols))) return SD_ENOMEM;
  /* activation rows SD_MB at a time: the kernels keep a row's accumulators on the stack */
  for (int64_t m0 = 0; m0 < M; m0 += SD_MB) {
    const int64_t mb = M - m0 < SD_MB ? M - m0 : SD_MB;
    const sd_act am = {a->qs ? a->qs + m0 * a->K : NULL, a->d ? a->d + m0 * (a->K / (a->blk ? a->blk : 1)) : NULL,
                       a->sums ? a->sums + m0 * (a->K / 16) : NULL, a->K, a->blk};
    float* ym = y + m0 * ldy;
    if (w->layout == SD_LAYOUT_X8) {
      if (mm_x8(w, &am, mb, n0, n1, ym, ldy)) return SD_ENOMEM;
      continue;
    }
    for (int64_t n = n0; n < n1; n++) {
      const uint8_t* wrow = (const uint8_t*)w->data + (int64_t)(rowmap ? rowmap[n] : n) * w->row_bytes;
      if (blk == QKK) mm_row_k(w->type, wrow, w->cols, &am, mb, ym + n, ldy);
      else if (blk == QK) mm_row_b(w->type, wrow, w->cols, &am, mb, ym + n, ldy);
      else mm_row_f(w->type, wrow, w->cols, x + m0 * w->cols, mb, ym + n, ldy, wbuf);
    }
  }
  sd_free(wbuf);
  return 0;
}

SD_EXPORT int sd_matmul(const float* x, int64_t M, int64_t K, int type, const void* w, int64_t N, int64_t row_bytes,
                        int layout, const int32_t* rowmap, float* y, int64_t ldy, int nthreads) {
  const int e = sd_blk_elems(type);
  if (!e) return SD_EUNSUPPORTED;
  if (K % e || K % 16) return SD_ESHAPE;
  if (layout == SD_LAYOUT_X8 && (!sd_x8_type(type) || N % 8 || rowmap)) return SD_ESHAPE;
  const int blk = sd_act_blk(type);
  sd_act a = {NULL, NULL, NULL, K, blk};
  if (blk) {
    a.qs = (int8_t*)sd_alloc((size_t)(M * K));
    a.d = (float*)sd_alloc(sizeof(float) * (size_t)(M * (K / blk)));
    a.sums = (int16_t*)sd_alloc(sizeof(int16_t) * (size_t)(M * (K / 16)));
    if (!a.qs || !a.d || !a.sums) {
      sd_free(a.qs); sd_free(a.d); sd_free(a.sums);
      return SD_ENOMEM;
    }
  }
  const sd_mat wm = {w, row_bytes, type, (int32_t)N, (int32_t)K, layout};
  if (nthreads < 1) nthreads = 1;
  int fail = 0;
#pragma omp parallel num_threads(nthreads)
  {
#ifdef _OPENMP
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
#else
    const int t = 0, T = 1;
#endif
    if (blk) {
      /* each thread quantizes its share of rows, then all wait: every thread reads every row */
      const int64_t r0 = M * t / T, r1 = M * (t + 1) / T;
      sd_quantize_rows(x + r0 * K, r1 - r0, K, blk, &a, r0);
#pragma omp barrier
    }
    /* chunks of output rows handed out as threads come free (see forward.c's matmul_group) */
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < (N + SD_ROW_CHUNK - 1) / SD_ROW_CHUNK; c++)
      if (sd_mm_rows(&wm, rowmap, &a, x, M, c * SD_ROW_CHUNK, c * SD_ROW_CHUNK + SD_ROW_CHUNK < N ? c * SD_ROW_CHUNK + SD_ROW_CHUNK : N,
                     y, ldy)) {
#pragma omp atomic write
        fail = 1;
      }
  }
  sd_free(a.qs); sd_free(a.d); sd_free(a.sums);
  return fail ? SD_ENOMEM : 0;
}

SD_EXPORT int sd_dequantize(int type, const void* data, int64_t row_bytes, int layout, const int32_t* rows, int64_t n,
                            int64_t K, float* out) {
  if (!sd_type_supported(type)) return SD_EUNSUPPORTED;
  if (layout == SD_LAYOUT_X8) {
    if (!sd_x8_type(type)) return SD_EUNSUPPORTED;
    uint8_t* row = (uint8_t*)sd_alloc((size_t)row_bytes);
    if (!row) return SD_ENOMEM;
    const sd_mat w = {data, row_bytes, type, 0, (int32_t)K, layout};
    for (int64_t i = 0; i < n; i++) {
      x8_row(&w, rows ? rows[i] : i, row);
      sd_dequantize_row(type, row, K, out + i * K);
    }
    sd_free(row);
    return 0;
  }
  for (int64_t i = 0; i < n; i++)
    sd_dequantize_row(type, (const uint8_t*)data + (int64_t)(rows ? rows[i] : i) * row_bytes, K, out + i * K);
  return 0;
}

/* ------------------------------------------------------------------ requantizing (drafts only)
   Float rows -> Q4_0 blocks (llama.cpp's reference rounding: the value of largest magnitude
   maps to code 0, d = that value / -8). Only ever for a draft's matrices: a draft's precision
   changes what it proposes, never the output, and 4-bit blocks are fewer bytes per drafted token. */
static void quantize_q4_0(const float* x, int64_t rows, int64_t K, void* out) {
  blk_q4_0* y = (blk_q4_0*)out;
  for (int64_t i = 0; i < rows * (K / QK); i++, x += QK) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++) {
      if (fabsf(x[j]) > amax) {
        amax = fabsf(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    /* fp32 -> fp16 bits, round to nearest even (d is a scale: normal range in practice) */
    uint32_t bits;
    memcpy(&bits, &d, 4);
    const uint32_t sign = (bits >> 16) & 0x8000;
    const int32_t exp = (int32_t)((bits >> 23) & 0xFF) - 127 + 15;
    uint16_t h;
    if (exp <= 0) {
      h = (uint16_t)sign; /* underflows to zero */
    } else if (exp >= 31) {
      h = (uint16_t)(sign | 0x7BFF); /* clamps to the largest finite half */
    } else {
      uint32_t m = bits & 0x7FFFFF, r = m & 0x1FFF;
      uint32_t v = ((uint32_t)exp << 10) | (m >> 13);
      if (r > 0x1000 || (r == 0x1000 && (v & 1))) v++;
      h = (uint16_t)(sign | (v > 0x7BFF ? 0x7BFF : v));
    }
    y[i].d = h;
    for (int j = 0; j < QK / 2; j++) {
      const int q0 = (int)(x[j] * id + 8.5f), q1 = (int)(x[j + QK / 2] * id + 8.5f);
      y[i].qs[j] = (uint8_t)((q0 > 15 ? 15 : q0 < 0 ? 0 : q0) | ((q1 > 15 ? 15 : q1 < 0 ? 0 : q1) << 4));
    }
  }
}

/* rows of any type the kernel reads -> Q4_0, in chunks of 256 rows across threads, written in
   the file's row layout or straight into the interleaved one (layout; rows a multiple of 8) */
SD_EXPORT int sd_requantize_q4_0(int type, const void* src, int64_t row_bytes, int64_t rows, int64_t K, void* out,
                                 int layout, int nthreads) {
  if (!sd_type_supported(type)) return SD_EUNSUPPORTED;
  if (K % QK || (layout == SD_LAYOUT_X8 && rows % 8)) return SD_ESHAPE;
  const int64_t chunk = 256, nchunks = (rows + chunk - 1) / chunk, out_bytes = K / QK * (int64_t)sizeof(blk_q4_0);
  int fail = 0;
#pragma omp parallel num_threads(nthreads > 0 ? nthreads : 1)
  {
    float* buf = (float*)sd_alloc(sizeof(float) * (size_t)(chunk * K));
    uint8_t* q = layout == SD_LAYOUT_X8 ? (uint8_t*)sd_alloc((size_t)(chunk * out_bytes)) : NULL;
    if (!buf || (layout == SD_LAYOUT_X8 && !q)) {
#pragma omp atomic write
      fail = 1;
    }
#pragma omp for schedule(static)
    for (int64_t c = 0; c < nchunks; c++) {
      if (!buf || (layout == SD_LAYOUT_X8 && !q)) continue;
      const int64_t r0 = c * chunk, n = rows - r0 < chunk ? rows - r0 : chunk;
      uint8_t* dst = (uint8_t*)out + r0 * out_bytes;
      sd_dequantize(type, (const uint8_t*)src + r0 * row_bytes, row_bytes, SD_LAYOUT_ROWS, NULL, n, K, buf);
      quantize_q4_0(buf, n, K, q ? q : dst);
      if (q) sd_repack(SD_Q4_0, q, out_bytes, n, K, dst, SD_LAYOUT_X8, 1); /* 256-row chunks: whole groups */
    }
    sd_free(buf);
    sd_free(q);
  }
  return fail ? SD_ENOMEM : 0;
}
