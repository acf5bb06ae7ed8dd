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
    if (out->sums32) { /* |sum| <= 32 * 127: an int16 */
      const int16_t* s16 = out->sums + r * (K / 16);
      for (int64_t j = 0; j < K / 32; j++) out->sums32[r * (K / 32) + j] = (int16_t)(s16[2 * j] + s16[2 * j + 1]);
    }
  }
}

SD_EXPORT void sd_quantize_act(const float* x, int64_t M, int64_t K, int blk, int8_t* qs, float* d, int16_t* sums) {
  sd_act a = {qs, d, sums, K, blk, NULL};
  sd_quantize_rows(x, M, K, blk, &a, 0);
}

static void act_from_float_32(const float* x, int64_t M, int64_t K, sd_act* out, int64_t row0) {
  sd_quantize_rows(x, M, K, QK, out, row0);
}
static void act_from_float_256(const float* x, int64_t M, int64_t K, sd_act* out, int64_t row0) {
  sd_quantize_rows(x, M, K, QKK, out, row0);
}

/* ------------------------------------------------------------------ the type traits
   The one table of what the kernel does with each block type (sdcpu.h's sd_type_traits), ahead
   of the kernels so that their block sizes are constants where they read them. The dot
   products are this build's: vec_dot_<type> is the instruction set's row_k / row_b for that
   type and vec_dot_x8_<type> its mm_x8_k / mm_x8_b (instanced below the includes); the float
   types' are here. An id with no entry is refused: sd_traits gives NULL. */

static sd_vec_dot vec_dot_f32, vec_dot_f16, vec_dot_bf16, vec_dot_q4_0, vec_dot_q4_1, vec_dot_q5_0, vec_dot_q5_1,
    vec_dot_q8_0, vec_dot_q4_K, vec_dot_q5_K, vec_dot_q6_K;
#define X8_DECL(t, TYPE, impl, kind) static sd_vec_dot_x8 vec_dot_x8_##t;
SD_X8_TYPES(X8_DECL) /* sdcpu.h's list */
#undef X8_DECL

/* a type's entry from its name (blk_<t>, sd_to_float_<t>, vec_dot_<t>, ...): float weights take
   float rows; block types take 8-bit activations in blocks of `act`; _X8: it also interleaves */
#define FLOAT_TYPE(T, bytes) {1, bytes, 0, NULL, sd_to_float_##T, vec_dot_##T, NULL, NULL}
#define BLOCK_TYPE(T, elems, act) {elems, (int)sizeof(blk_##T), act, act_from_float_##act, sd_to_float_##T, vec_dot_##T, NULL, NULL}
#define BLOCK_TYPE_X8(T, elems, act) \
  {elems, (int)sizeof(blk_##T), act, act_from_float_##act, sd_to_float_##T, vec_dot_##T, sd_x8_map_##T, vec_dot_x8_##T}

static const sd_type_traits type_traits[SD_TYPE_COUNT] = {
    [SD_F32] = FLOAT_TYPE(f32, 4),
    [SD_F16] = FLOAT_TYPE(f16, 2),
    [SD_BF16] = FLOAT_TYPE(bf16, 2),
    [SD_Q4_0] = BLOCK_TYPE_X8(q4_0, QK, 32),
    [SD_Q4_1] = BLOCK_TYPE(q4_1, QK, 32),
    [SD_Q5_0] = BLOCK_TYPE_X8(q5_0, QK, 32),
    [SD_Q5_1] = BLOCK_TYPE(q5_1, QK, 32),
    [SD_Q8_0] = BLOCK_TYPE_X8(q8_0, QK, 32),
    [SD_Q4_K] = BLOCK_TYPE_X8(q4_K, QKK, 256),
    [SD_Q5_K] = BLOCK_TYPE(q5_K, QKK, 256),
    [SD_Q6_K] = BLOCK_TYPE_X8(q6_K, QKK, 256),
};
#undef FLOAT_TYPE
#undef BLOCK_TYPE
#undef BLOCK_TYPE_X8

const sd_type_traits* sd_traits(int type) {
  return type >= 0 && type < SD_TYPE_COUNT && type_traits[type].vec_dot ? &type_traits[type] : NULL;
}

int sd_mat_check(const sd_mat* w) {
  const sd_type_traits* t = sd_traits(w->type);
  if (!t || (w->layout != SD_LAYOUT_ROWS && w->layout != SD_LAYOUT_X8)) return SD_EUNSUPPORTED;
  if (w->layout == SD_LAYOUT_X8 && !t->vec_dot_x8) return SD_EUNSUPPORTED;
  if (w->cols % t->blck_size || (w->layout == SD_LAYOUT_X8 && w->rows % 8)) return SD_ESHAPE;
  return SD_OK;
}

SD_EXPORT int sd_type_supported(int type) { return sd_traits(type) != NULL; }
SD_EXPORT int sd_x8_supported(int type) { return sd_traits(type) && sd_traits(type)->vec_dot_x8; }

/* ------------------------------------------------------------------ the row kernels
   row_k (K-quants) and row_b (32-element blocks), TYPE a constant: one weight row against rows
   [0, M) of the activations (M <= SD_MB), into y[m * ldy]; mm_x8_k and mm_x8_b, the same for
   rows [n0, n1) of an interleaved matrix. One implementation per instruction set, each
   computing the numbers this file's header defines. */
#if SD_X86
#include "dot_x86.h"
#include "x8_x86.h"
#elif SD_ARM
#include "dot_neon.h"
#include "x8_neon.h"
#else
#include "dot_portable.h"
/* the portable build unpacks each row of an x8 matrix and takes the row kernel: the same
   numbers, by construction */
static int mm_x8_rows(const int TYPE, const sd_mat* w, const sd_act* a, int64_t M, int64_t n0, int64_t n1, float* y,
                      int64_t ldy) {
  uint8_t* row = (uint8_t*)sd_alloc((size_t)w->row_bytes);
  if (!row) return SD_ENOMEM;
  for (int64_t n = n0; n < n1; n++) {
    sd_x8_row(w, n, row);
    type_traits[TYPE].vec_dot(row, w->cols, a, NULL, M, y + n, ldy, NULL);
  }
  sd_free(row);
  return 0;
}
#define mm_x8_k mm_x8_rows
#define mm_x8_b mm_x8_rows
#endif

/* the table's entries: this build's kernels, one instance per type */
#define VEC_DOT(t, TYPE, impl)                                                                                 \
  static void vec_dot_##t(const uint8_t* wrow, int64_t K, const sd_act* a, const float* x, int64_t M, float* y, \
                          int64_t ldy, float* wbuf) {                                                          \
    (void)x;                                                                                                  \
    (void)wbuf;                                                                                               \
    impl(TYPE, wrow, K, a, M, y, ldy);                                                                        \
  }
#if SD_X86 && defined(SD_VNNI) && SD_VNNI == 1 && !defined(SD_SIMDE_VNNI)
/* the same matmuls on ymm registers (x8_narrow.c), for the pass sizes this CPU runs faster so */
#define X8_NARROW(t, kind)                                                                                     \
  if (M >= sd_x8_narrow_rows[kind][0] && M <= sd_x8_narrow_rows[kind][1]) return sd_x8_narrow_##t(w, a, M, n0, n1, y, ldy);
#else
#define X8_NARROW(t, kind)
#endif
#define VEC_DOT_X8(t, TYPE, impl, kind)                                                                       \
  static int vec_dot_x8_##t(const sd_mat* w, const sd_act* a, int64_t M, int64_t n0, int64_t n1, float* y,    \
                            int64_t ldy) {                                                                    \
    X8_NARROW(t, kind)                                                                                         \
    return impl(TYPE, w, a, M, n0, n1, y, ldy);                                                               \
  }
VEC_DOT(q4_0, SD_Q4_0, row_b)
VEC_DOT(q4_1, SD_Q4_1, row_b)
VEC_DOT(q5_0, SD_Q5_0, row_b)
VEC_DOT(q5_1, SD_Q5_1, row_b)
VEC_DOT(q8_0, SD_Q8_0, row_b)
VEC_DOT(q4_K, SD_Q4_K, row_k)
VEC_DOT(q5_K, SD_Q5_K, row_k)
VEC_DOT(q6_K, SD_Q6_K, row_k)
SD_X8_TYPES(VEC_DOT_X8)
#undef VEC_DOT
#undef VEC_DOT_X8
#undef X8_NARROW

/* ------------------------------------------------------------------ float weights
   Float activations: each row's tree8 dot with the weight row, converted to floats once (wbuf)
   for all M rows. */

SD_INLINE void dot_float_rows(const float* w, int64_t K, const float* x, int64_t M, float* y, int64_t ldy) {
  for (int64_t m = 0; m < M; m++) y[m * ldy] = sd_tree8_dot(x + m * K, w, K);
}

static void vec_dot_f32(const uint8_t* wrow, int64_t K, const sd_act* a, const float* x, int64_t M, float* y,
                        int64_t ldy, float* wbuf) {
  (void)a;
  (void)wbuf;
  dot_float_rows((const float*)wrow, K, x, M, y, ldy);
}

static void vec_dot_f16(const uint8_t* wrow, int64_t K, const sd_act* a, const float* x, int64_t M, float* y,
                        int64_t ldy, float* wbuf) {
  (void)a;
#if SD_X86
  int64_t i = 0;
  for (; i + 8 <= K; i += 8)
    _mm256_storeu_ps(wbuf + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)((const uint16_t*)wrow + i))));
  for (; i < K; i++) wbuf[i] = sd_fp16_to_fp32(((const uint16_t*)wrow)[i]);
#else
  sd_to_float_f16(wrow, K, wbuf);
#endif
  dot_float_rows(wbuf, K, x, M, y, ldy);
}

static void vec_dot_bf16(const uint8_t* wrow, int64_t K, const sd_act* a, const float* x, int64_t M, float* y,
                         int64_t ldy, float* wbuf) {
  (void)a;
  sd_to_float_bf16(wrow, K, wbuf);
  dot_float_rows(wbuf, K, x, M, y, ldy);
}

/* ------------------------------------------------------------------ matmul */

int sd_mm_rows(const sd_mat* w, const int32_t* rowmap, const sd_act* a, const float* x, int64_t M,
               int64_t n0, int64_t n1, float* y, int64_t ldy) {
  const sd_type_traits* t = sd_traits(w->type);
  if (!t || (w->layout == SD_LAYOUT_X8 && !t->vec_dot_x8)) return SD_EUNSUPPORTED;
  float* wbuf = NULL; /* float weights other than F32 are converted into it, a row at a time */
  if (!t->act_blk && w->type != SD_F32 && !(wbuf = (float*)sd_alloc(sizeof(float) * (size_t)w->cols))) return SD_ENOMEM;
  /* activation rows SD_MB at a time: the kernels keep a row's accumulators on the stack */
  for (int64_t m0 = 0; m0 < M; m0 += SD_MB) {
    const int64_t mb = M - m0 < SD_MB ? M - m0 : SD_MB;
    const sd_act am = {a->qs ? a->qs + m0 * a->K : NULL, a->d ? a->d + m0 * (a->K / (a->blk ? a->blk : 1)) : NULL,
                       a->sums ? a->sums + m0 * (a->K / 16) : NULL, a->K, a->blk,
                       a->sums32 ? a->sums32 + m0 * (a->K / 32) : NULL};
    float* ym = y + m0 * ldy;
    if (w->layout == SD_LAYOUT_X8) {
      if (t->vec_dot_x8(w, &am, mb, n0, n1, ym, ldy)) return SD_ENOMEM;
      continue;
    }
    const float* xm = x ? x + m0 * w->cols : NULL;
    for (int64_t n = n0; n < n1; n++) {
      const uint8_t* wrow = (const uint8_t*)w->data + (int64_t)(rowmap ? rowmap[n] : n) * w->row_bytes;
      t->vec_dot(wrow, w->cols, &am, xm, mb, ym + n, ldy, wbuf);
    }
  }
  sd_free(wbuf);
  return 0;
}

/* Output rows of w a thread takes at a time: an eighth of its even share, in whole units of
   SD_ROW_CHUNK. Few large chunks, not many small ones: on the project's 2-core VMs each chunk
   handed out costs a shared counter's cache line moving between the cores and a restarted
   prefetch stream, and with the 32-row chunks of before (14-16 KB of a one-row pass's weights,
   under a microsecond of reading) that was a quarter of the draft's one-row step (speed notes,
   item 62). Eight chunks a thread still let one carry on where another program holds the other
   core for a while. Which rows a thread takes never changes a row's numbers: every output row is
   its own dot product, and a chunk starts on a whole interleaved unit (16 rows). */
int64_t sd_chunk_rows(const sd_mat* w, int nthreads) {
  const int64_t parts = 8 * (int64_t)(nthreads > 0 ? nthreads : 1);
  const int64_t rows = ((int64_t)w->rows + parts - 1) / parts;
  return rows <= SD_ROW_CHUNK ? SD_ROW_CHUNK : (rows + SD_ROW_CHUNK - 1) / SD_ROW_CHUNK * SD_ROW_CHUNK;
}

SD_EXPORT int sd_matmul(const float* x, int64_t M, int64_t K, int type, const void* w, int64_t N, int64_t row_bytes,
                        int layout, const int32_t* rowmap, float* y, int64_t ldy, int nthreads) {
  const sd_mat wm = {w, row_bytes, type, (int32_t)N, (int32_t)K, layout};
  const int bad = sd_mat_check(&wm);
  if (bad) return bad;
  if (K % 16 || (layout == SD_LAYOUT_X8 && rowmap)) return SD_ESHAPE;
  const sd_type_traits* t = sd_traits(type);
  const int blk = t->act_blk;
  sd_act a = {NULL, NULL, NULL, K, blk, NULL};
  if (blk) {
    a.qs = (int8_t*)sd_alloc((size_t)(M * K));
    a.d = (float*)sd_alloc(sizeof(float) * (size_t)(M * (K / blk)));
    a.sums = (int16_t*)sd_alloc(sizeof(int16_t) * (size_t)(M * (K / 16)));
    if (blk == QKK) a.sums32 = (int16_t*)sd_alloc(sizeof(int16_t) * (size_t)(M * (K / 32) + 1));
    if (!a.qs || !a.d || !a.sums || (blk == QKK && !a.sums32)) {
      sd_free(a.qs); sd_free(a.d); sd_free(a.sums); sd_free(a.sums32);
      return SD_ENOMEM;
    }
  }
  if (nthreads < 1) nthreads = 1;
  const int64_t CH = sd_chunk_rows(&wm, nthreads);
  int fail = 0;
#pragma omp parallel num_threads(nthreads)
  {
#ifdef _OPENMP
    const int th = omp_get_thread_num(), T = omp_get_num_threads();
#else
    const int th = 0, T = 1;
#endif
    if (t->from_float) {
      /* each thread quantizes its share of rows, then all wait: every thread reads every row */
      const int64_t r0 = M * th / T, r1 = M * (th + 1) / T;
      t->from_float(x + r0 * K, r1 - r0, K, &a, r0);
#pragma omp barrier
    }
    /* chunks of output rows handed out as threads come free (see forward.c's matmul_group) */
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < (N + CH - 1) / CH; c++) {
      const int rc = sd_mm_rows(&wm, rowmap, &a, x, M, c * CH, c * CH + CH < N ? c * CH + CH : N, y, ldy);
      if (rc) {
#pragma omp atomic write
        fail = rc;
      }
    }
  }
  sd_free(a.qs); sd_free(a.d); sd_free(a.sums); sd_free(a.sums32);
  return fail;
}

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

