/* The block formats as data: what a row of each type holds (dequantizing: lookups and tests),
   the interleaved layout's byte maps (repacking at load), and requantizing a draft's rows to
   Q4_0. Nothing here depends on the instruction set: every build compiles the same code, and
   quants.c's type_traits table points at these functions for each type they serve. */
#include "sdcpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
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
/* ------------------------------------------------------------------ dequantizing (lookups, tests)
   The values gguf-py's dequantize gives, bit for bit (each * and - one rounding, in its order).
   One function per type, K elements of a row (whole blocks). */

void sd_to_float_f32(const void* row, int64_t K, float* y) { memcpy(y, row, (size_t)K * 4); }

void sd_to_float_f16(const void* row, int64_t K, float* y) {
  for (int64_t i = 0; i < K; i++) y[i] = sd_fp16_to_fp32(((const uint16_t*)row)[i]);
}

void sd_to_float_bf16(const void* row, int64_t K, float* y) {
  for (int64_t i = 0; i < K; i++) y[i] = sd_bf16_to_fp32(((const uint16_t*)row)[i]);
}

void sd_to_float_q4_0(const void* row, int64_t K, float* y) {
  for (const blk_q4_0* b = row; K > 0; b++, K -= QK, y += QK) {
    const float d = sd_fp16_to_fp32(b->d);
    for (int j = 0; j < 16; j++) {
      y[j] = d * (float)((b->qs[j] & 0xF) - 8);
      y[j + 16] = d * (float)((b->qs[j] >> 4) - 8);
    }
  }
}

void sd_to_float_q4_1(const void* row, int64_t K, float* y) {
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

void sd_to_float_q5_0(const void* row, int64_t K, float* y) {
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

void sd_to_float_q5_1(const void* row, int64_t K, float* y) {
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

void sd_to_float_q8_0(const void* row, int64_t K, float* y) {
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

void sd_to_float_q4_K(const void* row, int64_t K, float* y) {
  for (const blk_q4_K* b = row; K > 0; b++, K -= QKK, y += QKK) deq_k45(b->d, b->dmin, b->scales, b->qs, NULL, y);
}

void sd_to_float_q5_K(const void* row, int64_t K, float* y) {
  for (const blk_q5_K* b = row; K > 0; b++, K -= QKK, y += QKK) deq_k45(b->d, b->dmin, b->scales, b->qs, b->qh, y);
}

void sd_to_float_q6_K(const void* row, int64_t K, float* y) {
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

/* ------------------------------------------------------------------ interleaved layouts (x8)
   One x8 block <-> the 8 row blocks it holds, both ways through the same byte map (so a repack
   and its inverse cannot disagree). Q4_K's scales are re-encoded in the same 96 bits: the low
   nibbles of scale | min, [j][row], then their top two bits, byte [j%4][row] holding scale and
   min of sub-block j (bits 0-3) and of j+4 (bits 4-7): a few vector ands and shifts unpack
   them for 8 rows at once. Q5_0's fifth bits are transposed for the same reason (sdcpu.h). */

#define X8_MOVE(x8p, rowp, n) (to_x8 ? memcpy((x8p), (rowp), (n)) : memcpy((rowp), (x8p), (n)))

void sd_x8_map_q4_K(uint8_t* const blocks[8], uint8_t* x8, int to_x8) {
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
}

void sd_x8_map_q6_K(uint8_t* const blocks[8], uint8_t* x8, int to_x8) {
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
}

/* Q4_0 and Q5_0 (five): the same layout but for Q5_0's fifth bits */
SD_INLINE void x8_map_q4_0_q5_0(const int five, uint8_t* const blocks[8], uint8_t* x8, int to_x8) {
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
}

void sd_x8_map_q4_0(uint8_t* const blocks[8], uint8_t* x8, int to_x8) { x8_map_q4_0_q5_0(0, blocks, x8, to_x8); }
void sd_x8_map_q5_0(uint8_t* const blocks[8], uint8_t* x8, int to_x8) { x8_map_q4_0_q5_0(1, blocks, x8, to_x8); }

void sd_x8_map_q8_0(uint8_t* const blocks[8], uint8_t* x8, int to_x8) {
  x8_q8_0* x = (x8_q8_0*)x8;
  for (int r = 0; r < 8; r++) {
    blk_q8_0* b = (blk_q8_0*)blocks[r];
    X8_MOVE(&x->d[r], &b->d, 2);
    for (int c = 0; c < 8; c++) X8_MOVE(x->qs + 32 * c + 4 * r, b->qs + 4 * c, 4);
  }
}

/* row n of an x8 matrix in the file's layout (row_bytes); the type has an x8 map */
void sd_x8_row(const sd_mat* w, int64_t n, uint8_t* row) {
  const sd_type_traits* t = sd_traits(w->type);
  const int bb = t->type_size;
  const int64_t nb = w->row_bytes / bb, g = n / 8;
  SD_ALIGN(64) uint8_t blocks[8][sizeof(blk_q6_K) + 6];
  uint8_t* ptr[8];
  for (int r = 0; r < 8; r++) ptr[r] = blocks[r];
  for (int64_t b = 0; b < nb; b++) {
    t->x8_map(ptr, (uint8_t*)w->data + (g * nb + b) * 8 * bb, 0);
    memcpy(row + b * bb, blocks[n % 8], (size_t)bb);
  }
}

/* rows -> x8 (layout SD_LAYOUT_X8) or x8 -> rows (SD_LAYOUT_ROWS: src is x8), groups across threads */
SD_EXPORT int sd_repack(int type, const void* src, int64_t row_bytes, int64_t rows, int64_t K, void* out, int layout,
                        int nthreads) {
  const sd_type_traits* t = sd_traits(type);
  if (!t || !t->x8_map) return SD_EUNSUPPORTED;
  const int bb = t->type_size, e = t->blck_size;
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
        t->x8_map(ptr, o + b * 8 * bb, 1);
      } else {
        for (int r = 0; r < 8; r++) ptr[r] = o + r * row_bytes + b * bb;
        t->x8_map(ptr, (uint8_t*)in + b * 8 * bb, 0);
      }
    }
  }
  return 0;
}

SD_EXPORT int sd_dequantize(int type, const void* data, int64_t row_bytes, int layout, const int32_t* rows, int64_t n,
                            int64_t K, float* out) {
  const sd_type_traits* t = sd_traits(type);
  if (!t) return SD_EUNSUPPORTED;
  if (K % t->blck_size) return SD_ESHAPE;
  if (layout == SD_LAYOUT_X8) {
    if (!t->x8_map) return SD_EUNSUPPORTED;
    uint8_t* row = (uint8_t*)sd_alloc((size_t)row_bytes);
    if (!row) return SD_ENOMEM;
    const sd_mat w = {data, row_bytes, type, 0, (int32_t)K, layout};
    for (int64_t i = 0; i < n; i++) {
      sd_x8_row(&w, rows ? rows[i] : i, row);
      t->to_float(row, K, out + i * K);
    }
    sd_free(row);
    return 0;
  }
  if (layout != SD_LAYOUT_ROWS) return SD_EUNSUPPORTED;
  for (int64_t i = 0; i < n; i++) t->to_float((const uint8_t*)data + (int64_t)(rows ? rows[i] : i) * row_bytes, K, out + i * K);
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
  const sd_type_traits* t = sd_traits(type);
  if (!t) return SD_EUNSUPPORTED;
  if (K % QK || K % t->blck_size || (layout == SD_LAYOUT_X8 && rows % 8)) return SD_ESHAPE;
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
