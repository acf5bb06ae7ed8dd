/* The row kernels in plain C: the reference every SIMD build must equal bit for bit.
   Included by quants.c (one of dot_*.h per build). Written for clarity, not speed: each
   block is unpacked into one unsigned byte per weight, then every activation row takes its
   integer dot against it. */

/* A prepared K-quant super-block: 256 unsigned codes in element order, a scale and a "min"
   weight per group of 16 (Q4_K/Q5_K: their 6-bit scale and min, each for both halves of a
   sub-block of 32; Q6_K: its int8 scale, also the weight of the -32 offset). */
typedef struct {
  uint8_t q[256];
  int16_t sc[16], mn[16];
  float d, dmin;
  int six;
} kprep;

static void prep_k(int type, const uint8_t* blk, kprep* p) {
  if (type == SD_Q6_K) {
    const blk_q6_K* b = (const blk_q6_K*)blk;
    p->d = sd_fp16_to_fp32(b->d);
    p->dmin = 0.0f;
    p->six = 1;
    for (int half = 0; half < 2; half++) {
      const uint8_t* ql = b->ql + 64 * half;
      const uint8_t* qh = b->qh + 32 * half;
      uint8_t* q = p->q + 128 * half;
      for (int l = 0; l < 32; l++) {
        q[l] = (uint8_t)((ql[l] & 0xF) | ((qh[l] & 3) << 4));
        q[l + 32] = (uint8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
        q[l + 64] = (uint8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
        q[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
      }
    }
    for (int g = 0; g < 16; g++) p->sc[g] = p->mn[g] = b->scales[g];
    return;
  }
  const int five = type == SD_Q5_K;
  const blk_q4_K* b4 = (const blk_q4_K*)blk;
  const blk_q5_K* b5 = (const blk_q5_K*)blk;
  const uint8_t* scales = five ? b5->scales : b4->scales;
  const uint8_t* qs = five ? b5->qs : b4->qs;
  p->d = sd_fp16_to_fp32(five ? b5->d : b4->d);
  p->dmin = sd_fp16_to_fp32(five ? b5->dmin : b4->dmin);
  p->six = 0;
  for (int j = 0; j < 8; j++) {
    int s, m;
    scale_min_k4(j, scales, &s, &m);
    p->sc[2 * j] = p->sc[2 * j + 1] = (int16_t)s;
    p->mn[2 * j] = p->mn[2 * j + 1] = (int16_t)m;
  }
  for (int c = 0; c < 4; c++)
    for (int l = 0; l < 32; l++) {
      uint8_t lo = qs[32 * c + l] & 0xF, hi = qs[32 * c + l] >> 4;
      if (five) {
        lo |= ((b5->qh[l] >> (2 * c)) & 1) << 4;
        hi |= ((b5->qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      p->q[64 * c + l] = lo;
      p->q[64 * c + 32 + l] = hi;
    }
}

/* A prepared group of up to 8 blocks of 32: unsigned codes (Q8_0: the signed ones), scales. */
typedef struct {
  uint8_t q[256];
  int8_t s[256];
  float d[8], m[8];
  int nb, off, kind; /* kind 0: offset codes (Q4_0, Q5_0), 1: scale and min (Q4_1, Q5_1), 2: signed (Q8_0) */
} bprep;

static void prep_b(int type, const uint8_t* blocks, int nb, bprep* p) {
  p->nb = nb;
  p->off = type == SD_Q4_0 ? 8 : type == SD_Q5_0 ? 16 : 0;
  p->kind = type == SD_Q8_0 ? 2 : (type == SD_Q4_1 || type == SD_Q5_1) ? 1 : 0;
  for (int i = 0; i < nb; i++) {
    uint8_t* q = p->q + 32 * i;
    p->m[i] = 0.0f;
    if (type == SD_Q4_0 || type == SD_Q4_1) {
      const uint8_t* qs;
      if (type == SD_Q4_0) {
        const blk_q4_0* b = (const blk_q4_0*)blocks + i;
        p->d[i] = sd_fp16_to_fp32(b->d);
        qs = b->qs;
      } else {
        const blk_q4_1* b = (const blk_q4_1*)blocks + i;
        p->d[i] = sd_fp16_to_fp32(b->d);
        p->m[i] = sd_fp16_to_fp32(b->m);
        qs = b->qs;
      }
      for (int j = 0; j < 16; j++) {
        q[j] = qs[j] & 0xF;
        q[j + 16] = qs[j] >> 4;
      }
    } else if (type == SD_Q5_0 || type == SD_Q5_1) {
      const uint8_t *qs, *qh8;
      if (type == SD_Q5_0) {
        const blk_q5_0* b = (const blk_q5_0*)blocks + i;
        p->d[i] = sd_fp16_to_fp32(b->d);
        qs = b->qs;
        qh8 = b->qh;
      } else {
        const blk_q5_1* b = (const blk_q5_1*)blocks + i;
        p->d[i] = sd_fp16_to_fp32(b->d);
        p->m[i] = sd_fp16_to_fp32(b->m);
        qs = b->qs;
        qh8 = b->qh;
      }
      const uint32_t qh = (uint32_t)qh8[0] | ((uint32_t)qh8[1] << 8) | ((uint32_t)qh8[2] << 16) | ((uint32_t)qh8[3] << 24);
      for (int j = 0; j < 16; j++) {
        q[j] = (uint8_t)((qs[j] & 0xF) | (((qh >> j) & 1) << 4));
        q[j + 16] = (uint8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
      }
    } else if (type == SD_Q8_0) {
      const blk_q8_0* b = (const blk_q8_0*)blocks + i;
      p->d[i] = sd_fp16_to_fp32(b->d);
      for (int j = 0; j < 32; j++) p->s[32 * i + j] = b->qs[j];
    }
  }
}


static void row_k(int type, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y, int64_t ldy) {
  const int64_t nb = K / QKK;
  const int bb = type_traits[type].type_size;
  float acc[SD_MB] = {0};
  kprep p;
  for (int64_t b = 0; b < nb; b++) {
    prep_k(type, wrow + b * bb, &p);
    for (int64_t m = 0; m < M; m++) {
      const int8_t* x = a->qs + m * K + b * QKK;
      const int16_t* bs = a->sums + m * (K / 16) + b * 16;
      const float dx = a->d[m * nb + b];
      int32_t S1 = 0, S2 = 0;
      for (int g = 0; g < 16; g++) {
        int32_t t = 0;
        for (int e = 0; e < 16; e++) t += (int32_t)p.q[16 * g + e] * x[16 * g + e];
        S1 += (int32_t)p.sc[g] * t;
        S2 += (int32_t)p.mn[g] * bs[g];
      }
      if (p.six) {
        acc[m] = acc[m] + (p.d * dx) * (float)(S1 - 32 * S2);
      } else {
        acc[m] = acc[m] + (p.d * dx) * (float)S1;
        acc[m] = acc[m] - (p.dmin * dx) * (float)S2;
      }
    }
  }
  for (int64_t m = 0; m < M; m++) y[m * ldy] = acc[m];
}

static void row_b(int type, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y, int64_t ldy) {
  const int64_t nb = K / QK, ng = (nb + 7) / 8;
  const int bb = type_traits[type].type_size;
  float lanes[8 * SD_MB] = {0};
  bprep p;
  for (int64_t g = 0; g < ng; g++) {
    const int n = nb - 8 * g < 8 ? (int)(nb - 8 * g) : 8;
    prep_b(type, wrow + 8 * g * bb, n, &p);
    for (int64_t m = 0; m < M; m++) {
      const int8_t* x = a->qs + m * K + g * 256;
      const int16_t* xs = a->sums + m * (K / 16) + g * 16;
      const float* dx = a->d + m * nb + g * 8;
      for (int i = 0; i < n; i++) {
        int32_t S = 0;
        for (int e = 0; e < 32; e++)
          S += p.kind == 2 ? (int32_t)p.s[32 * i + e] * x[32 * i + e] : (int32_t)p.q[32 * i + e] * x[32 * i + e];
        const int32_t X = (int32_t)xs[2 * i] + xs[2 * i + 1];
        S -= p.off * X;
        float t = (p.d[i] * dx[i]) * (float)S;
        if (p.kind == 1) t = t + (p.m[i] * dx[i]) * (float)X;
        lanes[8 * m + i] = lanes[8 * m + i] + t;
      }
    }
  }
  for (int64_t m = 0; m < M; m++) y[m * ldy] = tree8(lanes + 8 * m);
}
