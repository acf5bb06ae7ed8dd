/* The row kernels on AArch64 NEON (Apple Silicon, ARM servers). Included by quants.c.
   Each weight block is unpacked into registers, 16 codes to a register (every code fits a
   signed byte), once per block for all rows of the pass; 16 codes times 16 activations go
   through one sdot (ARMv8.2 dotprod, where the build has it) or two widening multiplies and a
   pairwise add. The integer sums are exact, and the float steps are dot_portable.h's in its
   order, so the results equal it bit for bit (tested under qemu-aarch64 in
   tests/test_cpu_kernel.py). */

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

/* ---------------------------------------------------------------- K-quants */

/* Q4_K / Q5_K's 6-bit scale and min of sub-block j (llama.cpp's get_scale_min_k4) */
SD_INLINE void nscale_min(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

/* A super-block unpacked: 16 registers of 16 codes (group g: elements 16g..16g+15), the scale
   and the sums' weight of each group, d and dmin. */
typedef struct {
  int8x16_t q[16];
  int32_t sc[16];
  int16_t mn[16];
  float d, dmin;
} nkblock;

SD_INLINE void unpack_nk(const int TYPE, const uint8_t* blk, nkblock* k) {
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  if (TYPE == SD_Q6_K) {
    const blk_q6_K* b = (const blk_q6_K*)blk;
    const uint8x16_t m2 = vdupq_n_u8(0x03);
    for (int h = 0; h < 2; h++) {
      const uint8_t* ql = b->ql + 64 * h;
      const uint8_t* qh = b->qh + 32 * h;
      const uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16), l2 = vld1q_u8(ql + 32), l3 = vld1q_u8(ql + 48);
      const uint8x16_t h0 = vld1q_u8(qh), h1 = vld1q_u8(qh + 16);
      int8x16_t* q = k->q + 8 * h;
      q[0] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(h0, m2), 4)));
      q[1] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(h1, m2), 4)));
      q[2] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l2, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h0, 2), m2), 4)));
      q[3] = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(l3, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h1, 2), m2), 4)));
      q[4] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h0, 4), m2), 4)));
      q[5] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h1, 4), m2), 4)));
      q[6] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l2, 4), vshlq_n_u8(vshrq_n_u8(h0, 6), 4)));
      q[7] = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(l3, 4), vshlq_n_u8(vshrq_n_u8(h1, 6), 4)));
    }
    for (int g = 0; g < 16; g++) k->mn[g] = (int16_t)(k->sc[g] = b->scales[g]);
    k->d = sd_fp16_to_fp32(b->d);
    k->dmin = 0.0f;
    return;
  }
  const blk_q4_K* b4 = (const blk_q4_K*)blk;
  const blk_q5_K* b5 = (const blk_q5_K*)blk;
  const uint8_t* qs = TYPE == SD_Q5_K ? b5->qs : b4->qs;
  const uint8_t* scales = TYPE == SD_Q5_K ? b5->scales : b4->scales;
  const uint8x16_t one = vdupq_n_u8(1);
  uint8x16_t hb0 = vdupq_n_u8(0), hb1 = vdupq_n_u8(0);
  if (TYPE == SD_Q5_K) {
    hb0 = vld1q_u8(b5->qh);
    hb1 = vld1q_u8(b5->qh + 16);
  }
  for (int c = 0; c < 4; c++) {
    const uint8x16_t v0 = vld1q_u8(qs + 32 * c), v1 = vld1q_u8(qs + 32 * c + 16);
    uint8x16_t lo0 = vandq_u8(v0, m4), lo1 = vandq_u8(v1, m4), hi0 = vshrq_n_u8(v0, 4), hi1 = vshrq_n_u8(v1, 4);
    if (TYPE == SD_Q5_K) { /* bit 2c of qh[l]: +16 on element 64c+l; bit 2c+1: on element 64c+32+l */
      const int8x16_t sh_lo = vdupq_n_s8((int8_t)(-2 * c)), sh_hi = vdupq_n_s8((int8_t)(-2 * c - 1));
      lo0 = vorrq_u8(lo0, vshlq_n_u8(vandq_u8(vshlq_u8(hb0, sh_lo), one), 4));
      lo1 = vorrq_u8(lo1, vshlq_n_u8(vandq_u8(vshlq_u8(hb1, sh_lo), one), 4));
      hi0 = vorrq_u8(hi0, vshlq_n_u8(vandq_u8(vshlq_u8(hb0, sh_hi), one), 4));
      hi1 = vorrq_u8(hi1, vshlq_n_u8(vandq_u8(vshlq_u8(hb1, sh_hi), one), 4));
    }
    k->q[4 * c + 0] = vreinterpretq_s8_u8(lo0);
    k->q[4 * c + 1] = vreinterpretq_s8_u8(lo1);
    k->q[4 * c + 2] = vreinterpretq_s8_u8(hi0);
    k->q[4 * c + 3] = vreinterpretq_s8_u8(hi1);
  }
  for (int j = 0; j < 8; j++) {
    int s, m;
    nscale_min(j, scales, &s, &m);
    k->sc[2 * j] = k->sc[2 * j + 1] = s;
    k->mn[2 * j] = k->mn[2 * j + 1] = (int16_t)m;
  }
  k->d = sd_fp16_to_fp32(TYPE == SD_Q5_K ? b5->d : b4->d);
  k->dmin = sd_fp16_to_fp32(TYPE == SD_Q5_K ? b5->dmin : b4->dmin);
}

SD_INLINE void nkrow(const nkblock* k, const int8_t* x, const int16_t* bs, int32_t* S1, int32_t* S2) {
  int32x4_t s1 = vdupq_n_s32(0);
  for (int g = 0; g < 16; g++) s1 = vmlaq_n_s32(s1, dot16(k->q[g], vld1q_s8(x + 16 * g)), k->sc[g]);
  const int16x8_t b0 = vld1q_s16(bs), b1 = vld1q_s16(bs + 8);
  const int16x8_t mn0 = vld1q_s16(k->mn), mn1 = vld1q_s16(k->mn + 8);
  int32x4_t s2 = vmull_s16(vget_low_s16(b0), vget_low_s16(mn0));
  s2 = vmlal_high_s16(s2, b0, mn0);
  s2 = vmlal_s16(s2, vget_low_s16(b1), vget_low_s16(mn1));
  s2 = vmlal_high_s16(s2, b1, mn1);
  *S1 = vaddvq_s32(s1);
  *S2 = vaddvq_s32(s2);
}

SD_INLINE void row_k(const int TYPE, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y,
                     int64_t ldy) {
  const int64_t nb = K / QKK, ns = K / 16;
  const int bb = type_traits[TYPE].type_size;
  float acc[SD_MB] = {0};
  nkblock k;
  for (int64_t b = 0; b < nb; b++) {
    unpack_nk(TYPE, wrow + b * bb, &k);
    for (int64_t m = 0; m < M; m++) {
      int32_t S1, S2;
      nkrow(&k, a->qs + m * K + b * QKK, a->sums + m * ns + b * 16, &S1, &S2);
      const float dx = a->d[m * nb + b];
      if (TYPE == SD_Q6_K) {
        acc[m] = acc[m] + (k.d * dx) * (float)(S1 - 32 * S2);
      } else {
        acc[m] = acc[m] + (k.d * dx) * (float)S1;
        acc[m] = acc[m] - (k.dmin * dx) * (float)S2;
      }
    }
  }
  for (int64_t m = 0; m < M; m++) y[m * ldy] = acc[m];
}

/* ---------------------------------------------------------------- 32-element blocks */

/* 16 bytes, 0x10 where bit e of `bits` is set (element e of 16) */
SD_INLINE uint8x16_t nbits16(uint32_t bits) {
  static const uint8_t sel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t spread = vcombine_u8(vdup_n_u8((uint8_t)(bits & 0xFF)), vdup_n_u8((uint8_t)((bits >> 8) & 0xFF)));
  return vandq_u8(vtstq_u8(spread, vld1q_u8(sel)), vdupq_n_u8(0x10));
}

/* block i's 32 codes as two registers (every code fits a signed byte; Q8_0's are signed), its
   scale and min */
SD_INLINE void nbcodes(const int TYPE, const uint8_t* blocks, int i, int8x16_t* c0, int8x16_t* c1, float* d, float* m) {
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  *m = 0.0f;
  if (TYPE == SD_Q8_0) {
    const blk_q8_0* b = (const blk_q8_0*)blocks + i;
    *c0 = vld1q_s8(b->qs);
    *c1 = vld1q_s8(b->qs + 16);
    *d = sd_fp16_to_fp32(b->d);
    return;
  }
  const uint8_t *qs, *qh8 = NULL;
  if (TYPE == SD_Q4_0) {
    const blk_q4_0* b = (const blk_q4_0*)blocks + i;
    qs = b->qs;
    *d = sd_fp16_to_fp32(b->d);
  } else if (TYPE == SD_Q4_1) {
    const blk_q4_1* b = (const blk_q4_1*)blocks + i;
    qs = b->qs;
    *d = sd_fp16_to_fp32(b->d);
    *m = sd_fp16_to_fp32(b->m);
  } else if (TYPE == SD_Q5_0) {
    const blk_q5_0* b = (const blk_q5_0*)blocks + i;
    qs = b->qs;
    qh8 = b->qh;
    *d = sd_fp16_to_fp32(b->d);
  } else {
    const blk_q5_1* b = (const blk_q5_1*)blocks + i;
    qs = b->qs;
    qh8 = b->qh;
    *d = sd_fp16_to_fp32(b->d);
    *m = sd_fp16_to_fp32(b->m);
  }
  const uint8x16_t v = vld1q_u8(qs);
  uint8x16_t lo = vandq_u8(v, m4), hi = vshrq_n_u8(v, 4);
  if (qh8) {
    const uint32_t qh = (uint32_t)qh8[0] | ((uint32_t)qh8[1] << 8) | ((uint32_t)qh8[2] << 16) | ((uint32_t)qh8[3] << 24);
    lo = vorrq_u8(lo, nbits16(qh));
    hi = vorrq_u8(hi, nbits16(qh >> 16));
  }
  *c0 = vreinterpretq_s8_u8(lo);
  *c1 = vreinterpretq_s8_u8(hi);
}

SD_INLINE void row_b(const int TYPE, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y,
                     int64_t ldy) {
  const int64_t nb = K / QK, ns = K / 16;
  const int off = TYPE == SD_Q4_0 ? 8 : TYPE == SD_Q5_0 ? 16 : 0;
  float lanes[8 * SD_MB] = {0};
  for (int64_t i = 0; i < nb; i++) {
    int8x16_t c0, c1;
    float d, mw;
    nbcodes(TYPE, wrow, (int)i, &c0, &c1, &d, &mw);
    for (int64_t m = 0; m < M; m++) {
      const int8_t* x = a->qs + m * K + 32 * i;
      const int32_t X = (int32_t)a->sums[m * ns + 2 * i] + a->sums[m * ns + 2 * i + 1];
      const int32_t S = vaddvq_s32(vaddq_s32(dot16(c0, vld1q_s8(x)), dot16(c1, vld1q_s8(x + 16)))) - off * X;
      const float dx = a->d[m * nb + i];
      float t = (d * dx) * (float)S;
      if (TYPE == SD_Q4_1 || TYPE == SD_Q5_1) t = t + (mw * dx) * (float)X;
      lanes[8 * m + (i & 7)] = lanes[8 * m + (i & 7)] + t;
    }
  }
  for (int64_t m = 0; m < M; m++) y[m * ldy] = tree8(lanes + 8 * m);
}
