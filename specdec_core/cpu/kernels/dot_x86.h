/* The row kernels on x86-64 (AVX2; AVX-VNNI / AVX512-VNNI add vpdpbusd on 256-bit registers).
   Included by quants.c. Each weight block is unpacked once into registers (32 codes a
   register, one unsigned byte per weight) and every activation row of the pass then costs
   maddubs (u8 x s8 -> pairs in s16) and madd (with the sub-block scales -> s32) per 32 weights.
   The integer sums are exact whatever the lane layout, and the float steps follow
   dot_portable.h's order, so the results equal it bit for bit (tests/test_cpu_kernel.py). */


SD_INLINE float h2f(uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }

/* int32 lanes of 32 u8 x s8 products, 4 to a lane. SD_VNNI (set by build.py): 1 = AVX512-VNNI
   on 256-bit registers, 2 = AVX-VNNI; unset = AVX2's maddubs + madd, the same sums (no pair of
   products here can saturate maddubs' int16: codes < 128 and |x| <= 127, or |w| <= 128 with
   |x| <= 127). SD_SIMDE_VNNI: the tests' build of a VNNI path on a CPU without it, through
   SIMDe's emulation of vpdpbusd. */
#if defined(SD_SIMDE_VNNI)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512/dpbusd.h>
#define SD_DPBUSD(u, s) simde_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#elif SD_VNNI == 1
#define SD_DPBUSD(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s)
#elif SD_VNNI == 2
#define SD_DPBUSD(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), u, s)
#endif

SD_INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
#if defined(SD_DPBUSD)
  return SD_DPBUSD(u, s);
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* [sum of a's lanes, sum of b's lanes] (exact: integer adds) */
SD_INLINE void hsum2(__m256i a, __m256i b, int32_t* sa, int32_t* sb) {
  const __m256i h = _mm256_hadd_epi32(a, b); /* a01 a23 b01 b23 | a45 a67 b45 b67 */
  __m128i q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  q = _mm_hadd_epi32(q, q);
  *sa = _mm_cvtsi128_si32(q);
  *sb = _mm_extract_epi32(q, 1);
}

/* 8 vectors of 8 int32 -> one vector of their 8 sums, in order */
SD_INLINE __m256i hsum8x8(const __m256i v[8]) {
  const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

/* ---------------------------------------------------------------- K-quants */

/* the int16 value at index j of each 128-bit lane, in all 8 positions of that lane */
SD_INLINE __m256i splat16(__m256i v, int lo, int hi) {
  const __m256i mask = _mm256_setr_epi8(
      2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1,
      2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1, 2 * lo, 2 * lo + 1,
      2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1,
      2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1, 2 * hi, 2 * hi + 1);
  return _mm256_shuffle_epi8(v, mask);
}

/* Q4_K / Q5_K's 8 scales (low 8 bytes) and 8 mins (high 8 bytes), 6 bits each, packed in 12
   bytes; unpacked as llama.cpp does, in registers (a 16-byte load of bytes just written by
   smaller stores could not be forwarded: a stall in front of every super-block) */
SD_INLINE __m128i scales_k4(const uint8_t* s) {
  uint32_t u0, u1, u2;
  memcpy(&u0, s, 4);
  memcpy(&u1, s + 4, 4);
  memcpy(&u2, s + 8, 4);
  const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
  return _mm_set_epi32((int)(((u2 >> 4) & k2) | (((u1 >> 6) & k3) << 4)), /* mn 4..7 */
                       (int)(u1 & k1),                                    /* mn 0..3 */
                       (int)((u2 & k2) | (((u0 >> 6) & k3) << 4)),        /* sc 4..7 */
                       (int)(u0 & k1));                                   /* sc 0..3 */
}

/* R rows (R = 1..8, TYPE and R constants where this is inlined) against one super-block,
   codes straight from the block into registers, 32 at a time, each used for all R rows:
   s[r] gets row r's S1 in 8 int32 lanes, t[r] its S2. Each row's accumulator stays in its
   register through the chunks (SD_KEEP); the block's bytes are read once for all rows. */
SD_INLINE void kdot(const int TYPE, const int R, const uint8_t* blk, const int8_t* x, int64_t ldx, const int16_t* bs,
                    int64_t ldb, __m256i s[8], __m256i t[8], float* d, float* dmin) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++) s[r] = t[r] = _mm256_setzero_si256();
  if (TYPE == SD_Q6_K) {
    const blk_q6_K* b = (const blk_q6_K*)blk;
    const __m256i m2 = _mm256_set1_epi8(0x03);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b->scales));
    const __m256i lo = _mm256_permute2x128_si256(sc, sc, 0x00), hi = _mm256_permute2x128_si256(sc, sc, 0x11);
#pragma GCC unroll 2
    for (int half = 0; half < 2; half++) {
      const __m256i l0 = _mm256_loadu_si256((const __m256i*)(b->ql + 64 * half));
      const __m256i l1 = _mm256_loadu_si256((const __m256i*)(b->ql + 64 * half + 32));
      const __m256i h = _mm256_loadu_si256((const __m256i*)(b->qh + 32 * half));
      const __m256i c[4] = {
          _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4)),
          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4))};
      const __m256i sv = half ? hi : lo;
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) {
        const __m256i scv = splat16(sv, 2 * j, 2 * j + 1);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
          const __m256i xv = _mm256_loadu_si256((const __m256i*)(x + r * ldx + 128 * half + 32 * j));
          s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(_mm256_maddubs_epi16(c[j], xv), scv));
          SD_KEEP(s[r]);
        }
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) t[r] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(bs + r * ldb)), sc);
    *d = h2f(b->d);
    *dmin = 0.0f;
    return;
  }
  const blk_q4_K* b4 = (const blk_q4_K*)blk;
  const blk_q5_K* b5 = (const blk_q5_K*)blk;
  const uint8_t* qs = TYPE == SD_Q5_K ? b5->qs : b4->qs;
  const __m128i scm = scales_k4(TYPE == SD_Q5_K ? b5->scales : b4->scales); /* 8 scales | 8 mins */
  const __m256i sm = _mm256_cvtepu8_epi16(scm);                              /* as int16 */
  const __m256i sc = _mm256_permute2x128_si256(sm, sm, 0x00);
  const __m256i hb = TYPE == SD_Q5_K ? _mm256_loadu_si256((const __m256i*)b5->qh) : _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi8(1);
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    const __m256i v = _mm256_loadu_si256((const __m256i*)(qs + 32 * c));
    __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (TYPE == SD_Q5_K) { /* bit 2c of qh[l]: +16 on element 64c+l; bit 2c+1: on element 64c+32+l */
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), one), 4));
    }
    const __m256i scl = splat16(sc, 2 * c, 2 * c), sch = splat16(sc, 2 * c + 1, 2 * c + 1);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const int8_t* xr = x + r * ldx + 64 * c;
      const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i*)xr)), scl);
      const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i*)(xr + 32))), sch);
      s[r] = _mm256_add_epi32(s[r], _mm256_add_epi32(pl, ph));
      SD_KEEP(s[r]);
    }
  }
  /* mins for the 16 sums: m_j for sums 2j and 2j+1 */
  const __m128i m8 = _mm_srli_si128(scm, 8);
  const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) t[r] = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(bs + r * ldb)), mn16);
  *d = h2f(TYPE == SD_Q5_K ? b5->d : b4->d);
  *dmin = h2f(TYPE == SD_Q5_K ? b5->dmin : b4->dmin);
}

/* A group of R rows (5..8) on one super-block: row r's sums land in lane r of v (lanes past R
   get 0), which the caller keeps in a register from one super-block to the next. */
SD_INLINE __m256 kgroup(const int TYPE, const int R, const uint8_t* blk, const sd_act* a, int64_t m0, int64_t b,
                        __m256 v) {
  const int64_t K = a->K, nb = K / QKK, ns = K / 16;
  __m256i s[8], t[8];
  float d, dmin;
  kdot(TYPE, R, blk, a->qs + m0 * K + b * QKK, K, a->sums + m0 * ns + b * 16, ns, s, t, &d, &dmin);
  const __m256i S1 = hsum8x8(s), S2 = hsum8x8(t);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 valid = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(R), lane));
  const __m256 dxv = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), a->d + m0 * nb + b,
                                              _mm256_mullo_epi32(lane, _mm256_set1_epi32((int)nb)), valid, 4);
  if (TYPE == SD_Q6_K) {
    v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), dxv),
                                       _mm256_cvtepi32_ps(_mm256_sub_epi32(S1, _mm256_slli_epi32(S2, 5)))));
  } else {
    v = _mm256_add_ps(v, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(d), dxv), _mm256_cvtepi32_ps(S1)));
    v = _mm256_sub_ps(v, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(dmin), dxv), _mm256_cvtepi32_ps(S2)));
  }
  return v;
}

/* R rows (1..4) of the activations, m0.., against one weight row, each finished alone as a
   one-row pass finishes it (the same float operations in the same order: equal results), the
   accumulators in registers: below 5 rows kgroup's 8-lane finish (two 8x8 sums, a gather,
   accumulators in memory) costs more than it shares. */
SD_INLINE void row_small(const int TYPE, const int R, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t m0,
                         float* y, int64_t ldy) {
  const int64_t nb = K / QKK, ns = K / 16;
  const int bb = type_traits[TYPE].type_size;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t b = 0; b < nb; b++) {
    __m256i s[8], t[8];
    float d, dmin;
    kdot(TYPE, R, wrow + b * bb, a->qs + m0 * K + b * QKK, K, a->sums + m0 * ns + b * 16, ns, s, t, &d, &dmin);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      int32_t S1, S2;
      hsum2(s[r], t[r], &S1, &S2);
      const float dx = a->d[(m0 + r) * nb + b];
      if (TYPE == SD_Q6_K) {
        acc[r] = acc[r] + (d * dx) * (float)(S1 - 32 * S2);
      } else {
        acc[r] = acc[r] + (d * dx) * (float)S1;
        acc[r] = acc[r] - (dmin * dx) * (float)S2;
      }
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) y[(m0 + r) * ldy] = acc[r];
}

SD_INLINE void row_k(const int TYPE, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y,
                     int64_t ldy) {
  const int64_t nb = K / QKK;
  const int bb = type_traits[TYPE].type_size;
  int64_t m0 = 0;
  for (; M - m0 >= 5; m0 += 8) {
    const int R = M - m0 < 8 ? (int)(M - m0) : 8;
    __m256 v = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t* blk = wrow + b * bb;
      /* the next block's bytes while this one's rows are multiplied (compute-bound here) */
      _mm_prefetch((const char*)(blk + bb), _MM_HINT_T0);
      _mm_prefetch((const char*)(blk + bb + 64), _MM_HINT_T0);
      _mm_prefetch((const char*)(blk + bb + 128), _MM_HINT_T0);
      _mm_prefetch((const char*)(blk + bb + 192), _MM_HINT_T0);
      switch (R) {
        case 8: v = kgroup(TYPE, 8, blk, a, m0, b, v); break;
        case 7: v = kgroup(TYPE, 7, blk, a, m0, b, v); break;
        case 6: v = kgroup(TYPE, 6, blk, a, m0, b, v); break;
        default: v = kgroup(TYPE, 5, blk, a, m0, b, v); break;
      }
    }
    SD_ALIGN(32) float out[8];
    _mm256_store_ps(out, v);
    for (int r = 0; r < R; r++) y[(m0 + r) * ldy] = out[r];
  }
  switch (M - m0) { /* the last 1..4 rows */
    case 4: row_small(TYPE, 4, wrow, K, a, m0, y, ldy); break;
    case 3: row_small(TYPE, 3, wrow, K, a, m0, y, ldy); break;
    case 2: row_small(TYPE, 2, wrow, K, a, m0, y, ldy); break;
    case 1: row_small(TYPE, 1, wrow, K, a, m0, y, ldy); break;
    default: break;
  }
}

/* ---------------------------------------------------------------- 32-element blocks */

/* 32 bytes, 0xFF where bit e of the 32-bit word is set (element e) */
SD_INLINE __m256i bits_to_bytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
      _mm256_setr_epi64x(0x0000000000000000LL, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

/* Block i of a row of 32-element blocks, TYPE a constant where this is inlined: its 32 codes
   as unsigned bytes (Q8_0: |w|, with *w the signed codes for the sign), its scale and min. */
SD_INLINE __m256i bcodes(const int TYPE, const uint8_t* blocks, int i, __m256i* w) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if (TYPE == SD_Q8_0) {
    *w = _mm256_loadu_si256((const __m256i*)((const blk_q8_0*)blocks)[i].qs);
    return _mm256_sign_epi8(*w, *w);
  }
  const uint8_t* qs = TYPE == SD_Q4_0 ? ((const blk_q4_0*)blocks)[i].qs : TYPE == SD_Q4_1 ? ((const blk_q4_1*)blocks)[i].qs
                    : TYPE == SD_Q5_0 ? ((const blk_q5_0*)blocks)[i].qs : ((const blk_q5_1*)blocks)[i].qs;
  const __m128i v = _mm_loadu_si128((const __m128i*)qs);
  __m256i c = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
  if (TYPE == SD_Q5_0 || TYPE == SD_Q5_1) {
    uint32_t qh;
    memcpy(&qh, TYPE == SD_Q5_0 ? ((const blk_q5_0*)blocks)[i].qh : ((const blk_q5_1*)blocks)[i].qh, 4);
    c = _mm256_or_si256(c, _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
  }
  return c;
}

/* the fp16 scales (or, with mins, the mins) of blocks 0..n-1 as 8 floats, 0 past n */
SD_INLINE __m256 bscales(const int TYPE, const uint8_t* blocks, int n, int mins) {
  const int bb = TYPE == SD_Q4_0 ? (int)sizeof(blk_q4_0) : TYPE == SD_Q4_1 ? (int)sizeof(blk_q4_1)
               : TYPE == SD_Q5_0 ? (int)sizeof(blk_q5_0) : TYPE == SD_Q5_1 ? (int)sizeof(blk_q5_1) : (int)sizeof(blk_q8_0);
  SD_ALIGN(16) uint16_t h[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < n && i < 8; i++) memcpy(h + i, blocks + i * bb + (mins ? 2 : 0), 2);
  return _mm256_cvtph_ps(_mm_load_si128((const __m128i*)h));
}

/* one row's 8 lanes += the group's blocks (v: their int32 dot lanes) */
SD_INLINE __m256 bfinish(const int TYPE, const __m256i v[8], const sd_act* a, int64_t m, int64_t gi, int n, __m256 dw,
                         __m256 mw, __m256 lanes) {
  const int64_t K = a->K, nb = K / QK, ns = K / 16;
  __m256i S = hsum8x8(v), X;
  __m256 dx;
  if (n == 8) {
    X = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(a->sums + m * ns + gi * 16)), _mm256_set1_epi16(1));
    dx = _mm256_loadu_ps(a->d + m * nb + gi * 8);
  } else { /* a row's last, partial group (K = 896: 28 blocks): read only its own blocks, one
              32-bit lane each (two int16 sums, one float scale), the rest 0 */
    const __m256i own = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    X = _mm256_madd_epi16(_mm256_maskload_epi32((const int*)(a->sums + m * ns + gi * 16), own), _mm256_set1_epi16(1));
    dx = _mm256_maskload_ps(a->d + m * nb + gi * 8, own);
  }
  if (TYPE == SD_Q4_0) S = _mm256_sub_epi32(S, _mm256_slli_epi32(X, 3));
  if (TYPE == SD_Q5_0) S = _mm256_sub_epi32(S, _mm256_slli_epi32(X, 4));
  __m256 t = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(S));
  if (TYPE == SD_Q4_1 || TYPE == SD_Q5_1) t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_mul_ps(mw, dx), _mm256_cvtepi32_ps(X)));
  return _mm256_add_ps(lanes, t);
}

SD_INLINE void row_b(const int TYPE, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y, int64_t ldy) {
  const int64_t nb = K / QK, ng = (nb + 7) / 8;
  const int bb = type_traits[TYPE].type_size, with_min = TYPE == SD_Q4_1 || TYPE == SD_Q5_1;
  if (M == 1) { /* codes straight from the blocks into the dot: no unpacked copy */
    __m256 lanes = _mm256_setzero_ps();
    for (int64_t gi = 0; gi < ng; gi++) {
      const int n = nb - 8 * gi < 8 ? (int)(nb - 8 * gi) : 8;
      const uint8_t* blocks = wrow + 8 * gi * bb;
      const int8_t* x = a->qs + gi * 256;
      __m256i v[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) {
        if (i < n) {
          __m256i w, xv = _mm256_loadu_si256((const __m256i*)(x + 32 * i));
          const __m256i c = bcodes(TYPE, blocks, i, &w);
          if (TYPE == SD_Q8_0) xv = _mm256_sign_epi8(xv, w);
          v[i] = dot_u8s8(c, xv);
        } else {
          v[i] = _mm256_setzero_si256();
        }
      }
      const __m256 dw = bscales(TYPE, blocks, n, 0), mw = with_min ? bscales(TYPE, blocks, n, 1) : dw;
      lanes = bfinish(TYPE, v, a, 0, gi, n, dw, mw, lanes);
    }
    y[0] = tree8_v(lanes);
    return;
  }
  float lanes[8 * SD_MB]; /* 8 lanes a row */
  for (int64_t i = 0; i < 8 * M; i++) lanes[i] = 0.0f;
  SD_ALIGN(32) __m256i c[8], w[8];
  for (int64_t gi = 0; gi < ng; gi++) {
    const int n = nb - 8 * gi < 8 ? (int)(nb - 8 * gi) : 8;
    const uint8_t* blocks = wrow + 8 * gi * bb;
    for (int i = 0; i < n; i++) c[i] = bcodes(TYPE, blocks, i, w + i);
    const __m256 dw = bscales(TYPE, blocks, n, 0), mw = with_min ? bscales(TYPE, blocks, n, 1) : dw;
    for (int64_t m = 0; m < M; m++) {
      const int8_t* x = a->qs + m * K + gi * 256;
      __m256i v[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) {
        if (i < n) {
          __m256i xv = _mm256_loadu_si256((const __m256i*)(x + 32 * i));
          if (TYPE == SD_Q8_0) xv = _mm256_sign_epi8(xv, w[i]);
          v[i] = dot_u8s8(c[i], xv);
        } else {
          v[i] = _mm256_setzero_si256();
        }
      }
      _mm256_storeu_ps(lanes + 8 * m, bfinish(TYPE, v, a, m, gi, n, dw, mw, _mm256_loadu_ps(lanes + 8 * m)));
    }
  }
  for (int64_t m = 0; m < M; m++) y[m * ldy] = tree8_v(_mm256_loadu_ps(lanes + 8 * m));
}
