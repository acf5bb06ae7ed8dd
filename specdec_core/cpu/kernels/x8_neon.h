/* The interleaved ("x8", sdcpu.h) matmuls on AArch64 NEON. Included by quants.c after dot_neon.h.

   A chunk of 8 rows x 4 codes is two registers (rows 0-3, rows 4-7); an activation row's 4
   codes are broadcast against them: sdot (ARMv8.2 dotprod) or two widening multiplies and two
   pairwise adds put each row's sum in its own 32-bit lane. Every code fits a signed byte (Q8_0's
   are signed), so no offset trick is needed; int16 pairs of products stay <= 2 * 128 * 127.
   The float steps are dot_portable.h's, lane by lane: the results equal it bit for bit (tested
   under qemu-aarch64 in tests/test_cpu_kernel.py). */

/* acc + per row (4 lanes) the sum of its 4 codes in c times the 4 activation codes in x */
SD_INLINE int32x4_t n8_dot4(int32x4_t acc, int8x16_t c, int8x16_t x) {
#if defined(__ARM_FEATURE_DOTPROD)
  return vdotq_s32(acc, c, x);
#else
  const int16x8_t p = vpaddq_s16(vmull_s8(vget_low_s8(c), vget_low_s8(x)), vmull_high_s8(c, x));
  return vpadalq_s16(acc, p);
#endif
}

SD_INLINE int8x16_t n8_bcast4(const int8_t* p) {
  int32_t v;
  memcpy(&v, p, 4);
  return vreinterpretq_s8_s32(vdupq_n_s32(v));
}

SD_INLINE float32x4_t n8_h4(const uint16_t* p) {
  return (float32x4_t){sd_fp16_to_fp32(p[0]), sd_fp16_to_fp32(p[1]), sd_fp16_to_fp32(p[2]), sd_fp16_to_fp32(p[3])};
}

/* ---------------------------------------------------------------- K-quants */

typedef struct {
  SD_ALIGN(16) int8_t codes[64][32]; /* chunk c: elements 4c..4c+3 of the 8 rows */
  SD_ALIGN(16) int32_t sc[16][8];    /* scale unit u's scale of each row */
  SD_ALIGN(16) int32_t w2[16][8];    /* S2's weight of the activation's sum g, per row */
  float d[8], dmin[8];
} nkx8;

SD_INLINE void nkx8_decode(const int TYPE, const uint8_t* blk, nkx8* s) {
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  if (TYPE == SD_Q4_K) {
    const x8_q4_K* x = (const x8_q4_K*)blk;
    for (int c = 0; c < 4; c++)
      for (int k = 0; k < 8; k++)
        for (int h = 0; h < 2; h++) {
          const uint8x16_t raw = vld1q_u8(x->qs + (c * 8 + k) * 32 + 16 * h);
          vst1q_s8(s->codes[16 * c + k] + 16 * h, vreinterpretq_s8_u8(vandq_u8(raw, m4)));
          vst1q_s8(s->codes[16 * c + 8 + k] + 16 * h, vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)));
        }
    for (int j = 0; j < 8; j++)
      for (int r = 0; r < 8; r++) {
        const int lo = x->scales[8 * j + r], hi = x->scales[64 + 8 * (j & 3) + r] >> (j < 4 ? 0 : 4);
        s->sc[j][r] = (lo & 15) | ((hi & 3) << 4);
        s->w2[2 * j][r] = s->w2[2 * j + 1][r] = (lo >> 4) | (((hi >> 2) & 3) << 4);
      }
    for (int r = 0; r < 8; r++) {
      s->d[r] = sd_fp16_to_fp32(x->d[r]);
      s->dmin[r] = sd_fp16_to_fp32(x->dmin[r]);
    }
    return;
  }
  const x8_q6_K* x = (const x8_q6_K*)blk;
  const uint8x16_t m30 = vdupq_n_u8(0x30);
  for (int h = 0; h < 2; h++)
    for (int k = 0; k < 8; k++)
      for (int q = 0; q < 2; q++) {
        const uint8x16_t l0 = vld1q_u8(x->ql + ((2 * h) * 8 + k) * 32 + 16 * q);
        const uint8x16_t l1 = vld1q_u8(x->ql + ((2 * h + 1) * 8 + k) * 32 + 16 * q);
        const uint8x16_t hb = vld1q_u8(x->qh + (h * 8 + k) * 32 + 16 * q);
        vst1q_s8(s->codes[32 * h + k] + 16 * q, vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l0, m4), vandq_u8(vshlq_n_u8(hb, 4), m30))));
        vst1q_s8(s->codes[32 * h + 8 + k] + 16 * q, vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l1, m4), vandq_u8(vshlq_n_u8(hb, 2), m30))));
        vst1q_s8(s->codes[32 * h + 16 + k] + 16 * q, vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l0, 4), vandq_u8(hb, m30))));
        vst1q_s8(s->codes[32 * h + 24 + k] + 16 * q, vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l1, 4), vandq_u8(vshrq_n_u8(hb, 2), m30))));
      }
  for (int g = 0; g < 16; g++)
    for (int r = 0; r < 8; r++) s->sc[g][r] = s->w2[g][r] = x->scales[8 * g + r];
  for (int r = 0; r < 8; r++) {
    s->d[r] = sd_fp16_to_fp32(x->d[r]);
    s->dmin[r] = 0.0f;
  }
}

SD_INLINE void nkx8_unit(const int TYPE, const sd_mat* w, const sd_act* a, int64_t M, int64_t g, float* acc) {
  const int64_t K = w->cols, nb = K / QKK, ns = K / 16;
  const size_t xb = TYPE == SD_Q4_K ? sizeof(x8_q4_K) : sizeof(x8_q6_K);
  const int units = TYPE == SD_Q4_K ? 8 : 16, per = TYPE == SD_Q4_K ? 8 : 4;
  nkx8 s;
  for (int64_t i = 0; i < M * 8; i++) acc[i] = 0.0f;
  for (int64_t b = 0; b < nb; b++) {
    nkx8_decode(TYPE, (const uint8_t*)w->data + (g * nb + b) * xb, &s);
    for (int64_t m = 0; m < M; m++) {
      const int8_t* x = a->qs + m * K + b * QKK;
      const int16_t* bs = a->sums + m * ns + b * 16;
      int32x4_t s1[2] = {vdupq_n_s32(0), vdupq_n_s32(0)}, s2[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
      for (int u = 0; u < units; u++) {
        int32x4_t t[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
        for (int c = u * per; c < (u + 1) * per; c++) {
          const int8x16_t xv = n8_bcast4(x + 4 * c);
          t[0] = n8_dot4(t[0], vld1q_s8(s.codes[c]), xv);
          t[1] = n8_dot4(t[1], vld1q_s8(s.codes[c] + 16), xv);
        }
        for (int h = 0; h < 2; h++) s1[h] = vmlaq_s32(s1[h], t[h], vld1q_s32(s.sc[u] + 4 * h));
      }
      for (int gg = 0; gg < 16; gg++)
        for (int h = 0; h < 2; h++) s2[h] = vmlaq_n_s32(s2[h], vld1q_s32(s.w2[gg] + 4 * h), bs[gg]);
      const float32x4_t dxv = vdupq_n_f32(a->d[m * nb + b]);
      for (int h = 0; h < 2; h++) {
        float32x4_t v = vld1q_f32(acc + m * 8 + 4 * h);
        const float32x4_t dd = vmulq_f32(vld1q_f32(s.d + 4 * h), dxv);
        if (TYPE == SD_Q6_K) {
          v = vaddq_f32(v, vmulq_f32(dd, vcvtq_f32_s32(vsubq_s32(s1[h], vshlq_n_s32(s2[h], 5)))));
        } else {
          v = vaddq_f32(v, vmulq_f32(dd, vcvtq_f32_s32(s1[h])));
          v = vsubq_f32(v, vmulq_f32(vmulq_f32(vld1q_f32(s.dmin + 4 * h), dxv), vcvtq_f32_s32(s2[h])));
        }
        vst1q_f32(acc + m * 8 + 4 * h, v);
      }
    }
  }
}

/* ---------------------------------------------------------------- 32-element blocks */

SD_INLINE void nbx8_unit(const int TYPE, const sd_mat* w, const sd_act* a, int64_t M, int64_t g, float* lanes) {
  const int64_t K = w->cols, nb = K / QK, ns = K / 16;
  const size_t xb = TYPE == SD_Q4_0 ? sizeof(x8_q4_0) : TYPE == SD_Q5_0 ? sizeof(x8_q5_0) : sizeof(x8_q8_0);
  const int off = TYPE == SD_Q4_0 ? 8 : TYPE == SD_Q5_0 ? 16 : 0;
  const uint8x16_t m4 = vdupq_n_u8(0x0F), b4 = vdupq_n_u8(0x10);
  for (int64_t i = 0; i < M * 64; i++) lanes[i] = 0.0f;
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t* blk = (const uint8_t*)w->data + (g * nb + b) * xb;
    int8x16_t c[8][2];
    if (TYPE == SD_Q8_0) {
      for (int k = 0; k < 8; k++)
        for (int h = 0; h < 2; h++) c[k][h] = vld1q_s8(((const x8_q8_0*)blk)->qs + 32 * k + 16 * h);
    } else {
      const uint8_t* qs = TYPE == SD_Q4_0 ? ((const x8_q4_0*)blk)->qs : ((const x8_q5_0*)blk)->qs;
      for (int k = 0; k < 4; k++)
        for (int h = 0; h < 2; h++) {
          const uint8x16_t raw = vld1q_u8(qs + 32 * k + 16 * h);
          uint8x16_t lo = vandq_u8(raw, m4), hi = vshrq_n_u8(raw, 4);
          if (TYPE == SD_Q5_0) { /* bit k (k + 4) of qh's byte: the fifth bit of chunk k (k + 4) */
            const uint8x16_t t = vld1q_u8(((const x8_q5_0*)blk)->qh + 16 * h);
            lo = vorrq_u8(lo, vandq_u8(vshlq_u8(t, vdupq_n_s8((int8_t)(4 - k))), b4));
            hi = vorrq_u8(hi, vandq_u8(vshlq_u8(t, vdupq_n_s8((int8_t)(-k))), b4));
          }
          c[k][h] = vreinterpretq_s8_u8(lo);
          c[k + 4][h] = vreinterpretq_s8_u8(hi);
        }
    }
    const float32x4_t d[2] = {n8_h4((const uint16_t*)blk), n8_h4((const uint16_t*)blk + 4)};
    for (int64_t m = 0; m < M; m++) {
      const int8_t* x = a->qs + m * K + 32 * b;
      int32x4_t t[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
      for (int k = 0; k < 8; k++) {
        const int8x16_t xv = n8_bcast4(x + 4 * k);
        for (int h = 0; h < 2; h++) t[h] = n8_dot4(t[h], c[k][h], xv);
      }
      const int32_t X = (int32_t)a->sums[m * ns + 2 * b] + a->sums[m * ns + 2 * b + 1];
      const float32x4_t dxv = vdupq_n_f32(a->d[m * nb + b]);
      for (int h = 0; h < 2; h++) {
        float* l = lanes + (m * 8 + (b & 7)) * 8 + 4 * h;
        const int32x4_t S = vsubq_s32(t[h], vdupq_n_s32(off * X));
        vst1q_f32(l, vaddq_f32(vld1q_f32(l), vmulq_f32(vmulq_f32(d[h], dxv), vcvtq_f32_s32(S))));
      }
    }
  }
}

/* rows [n0, n1) of an x8 matrix (multiples of 8) for M <= SD_MB activation rows, TYPE a
   constant: mm_x8_k for the K-quants, mm_x8_b for the 32-element blocks */
SD_INLINE int mm_x8_k(const int TYPE, const sd_mat* w, const sd_act* a, int64_t M, int64_t n0, int64_t n1, float* y,
                      int64_t ldy) {
  float acc[SD_MB * 64];
  for (int64_t g = n0 / 8; g < n1 / 8; g++) {
    nkx8_unit(TYPE, w, a, M, g, acc);
    for (int64_t m = 0; m < M; m++) memcpy(y + m * ldy + 8 * g, acc + m * 8, sizeof(float) * 8);
  }
  return 0;
}

SD_INLINE int mm_x8_b(const int TYPE, const sd_mat* w, const sd_act* a, int64_t M, int64_t n0, int64_t n1, float* y,
                      int64_t ldy) {
  float acc[SD_MB * 64];
  for (int64_t g = n0 / 8; g < n1 / 8; g++) {
    nbx8_unit(TYPE, w, a, M, g, acc);
    for (int64_t m = 0; m < M; m++) {
      float* out = y + m * ldy + 8 * g;
      const float* l = acc + m * 64;
      for (int h = 0; h < 2; h++) {
        const float32x4_t v = vaddq_f32(vaddq_f32(vaddq_f32(vld1q_f32(l + 4 * h), vld1q_f32(l + 32 + 4 * h)),
                                                  vaddq_f32(vld1q_f32(l + 16 + 4 * h), vld1q_f32(l + 48 + 4 * h))),
                                        vaddq_f32(vaddq_f32(vld1q_f32(l + 8 + 4 * h), vld1q_f32(l + 40 + 4 * h)),
                                                  vaddq_f32(vld1q_f32(l + 24 + 4 * h), vld1q_f32(l + 56 + 4 * h))));
        vst1q_f32(out + 4 * h, v);
      }
    }
  }
  return 0;
}
