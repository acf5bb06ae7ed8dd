/* The row kernels in plain C: the reference every SIMD build must equal bit for bit.
   Included by quants.c (one of dot_*.h per build). Written for clarity, not speed: each
   block is unpacked into one unsigned byte per weight (prep.h), then every activation row
   takes its integer dot against it. */
#include "prep.h"

static void mm_row_k(int type, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y, int64_t ldy) {
  const int64_t nb = K / QKK;
  const int bb = sd_blk_bytes(type);
  float* acc = (float*)calloc((size_t)M, sizeof(float));
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
  free(acc);
}

static void mm_row_b(int type, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y, int64_t ldy) {
  const int64_t nb = K / QK, ng = (nb + 7) / 8;
  const int bb = sd_blk_bytes(type);
  float* lanes = (float*)calloc((size_t)(8 * M), sizeof(float));
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
  free(lanes);
}
