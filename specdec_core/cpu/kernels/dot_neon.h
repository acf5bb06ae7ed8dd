/* The row kernels on AArch64 NEON (Apple Silicon, ARM servers). Included by quants.c.
   Blocks are unpacked into one byte per weight (prep.h); every code fits a signed byte, so
   16 codes times 16 activations go through one sdot (ARMv8.2 dotprod, where the build has it)
   or two widening multiplies and a pairwise add. The integer sums are exact, and the float
   steps are dot_portable.h's in its order, so the results equal it bit for bit (tested under
   qemu-aarch64 in tests/test_cpu_kernel.py). */
#include "prep.h"

/* 4 int32 lanes summing 16 signed-byte products */
SD_INLINE int32x4_t dot16(int8x16_t a, int8x16_t b) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(vdupq_n_s32(0), a, b);
#else
  /* |a*b| <= 128*127: a pair of them fits int16 */
  const int16x8_t p = vaddq_s16(vmull_s8(vget_low_s8(a), vget_low_s8(b)), vmull_high_s8(a, b));
  return vpaddlq_s16(p);
#endif
}

static void mm_row_k(int type, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y, int64_t ldy) {
  const int64_t nb = K / QKK, ns = K / 16;
  const int bb = sd_blk_bytes(type);
  float* acc = (float*)calloc((size_t)M, sizeof(float));
  kprep p;
  for (int64_t b = 0; b < nb; b++) {
    prep_k(type, wrow + b * bb, &p);
    int8x16_t q[16];
    for (int g = 0; g < 16; g++) q[g] = vreinterpretq_s8_u8(vld1q_u8(p.q + 16 * g));
    const int16x8_t mn0 = vld1q_s16(p.mn), mn1 = vld1q_s16(p.mn + 8);
    for (int64_t m = 0; m < M; m++) {
      const int8_t* x = a->qs + m * K + b * QKK;
      const int16_t* bs = a->sums + m * ns + b * 16;
      int32x4_t s1 = vdupq_n_s32(0);
      for (int g = 0; g < 16; g++) s1 = vmlaq_n_s32(s1, dot16(q[g], vld1q_s8(x + 16 * g)), p.sc[g]);
      const int16x8_t b0 = vld1q_s16(bs), b1 = vld1q_s16(bs + 8);
      int32x4_t s2 = vmull_s16(vget_low_s16(b0), vget_low_s16(mn0));
      s2 = vmlal_high_s16(s2, b0, mn0);
      s2 = vmlal_s16(s2, vget_low_s16(b1), vget_low_s16(mn1));
      s2 = vmlal_high_s16(s2, b1, mn1);
      const int32_t S1 = vaddvq_s32(s1), S2 = vaddvq_s32(s2);
      const float dx = a->d[m * nb + b];
      if (p.six) {
        acc[m] = acc[m] + (p.d * dx) * (float)(S1 - 32 * S2);
      } else {
        acc[m] = acc[m] + (p.d * dx) * (float)S1;
        acc[m] = acc[m] - (p.dmin * dx) * (float)S2;
      }
    }
  }
  for (int64_t m = 0; m < M; m++) y[m * ldy] = acc[m];
  free(acc);
}

static void mm_row_b(int type, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y, int64_t ldy) {
  const int64_t nb = K / QK, ng = (nb + 7) / 8, ns = K / 16;
  const int bb = sd_blk_bytes(type);
  float* lanes = (float*)calloc((size_t)(8 * M), sizeof(float));
  bprep p;
  for (int64_t g = 0; g < ng; g++) {
    const int n = nb - 8 * g < 8 ? (int)(nb - 8 * g) : 8;
    prep_b(type, wrow + 8 * g * bb, n, &p);
    const int8_t* codes = p.kind == 2 ? p.s : (const int8_t*)p.q; /* every unsigned code is < 32 */
    for (int64_t m = 0; m < M; m++) {
      const int8_t* x = a->qs + m * K + g * 256;
      const int16_t* xs = a->sums + m * ns + g * 16;
      const float* dx = a->d + m * nb + g * 8;
      for (int i = 0; i < n; i++) {
        const int32x4_t v = vaddq_s32(dot16(vld1q_s8(codes + 32 * i), vld1q_s8(x + 32 * i)),
                                      dot16(vld1q_s8(codes + 32 * i + 16), vld1q_s8(x + 32 * i + 16)));
        const int32_t X = (int32_t)xs[2 * i] + xs[2 * i + 1];
        const int32_t S = vaddvq_s32(v) - p.off * X;
        float t = (p.d[i] * dx[i]) * (float)S;
        if (p.kind == 1) t = t + (p.m[i] * dx[i]) * (float)X;
        lanes[8 * m + i] = lanes[8 * m + i] + t;
      }
    }
  }
  for (int64_t m = 0; m < M; m++) y[m * ldy] = tree8(lanes + 8 * m);
  free(lanes);
}
