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

/* Q4_K / Q5_K's 8 scales and 8 mins (6 bits each, packed in 12 bytes), as llama.cpp unpacks them */
SD_INLINE void scales_k4(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
  uint32_t u[3], o[4];
  memcpy(u, s, 12);
  const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
  o[0] = u[0] & k1;                                   /* sc 0..3 */
  o[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);     /* sc 4..7 */
  o[2] = u[1] & k1;                                   /* mn 0..3 */
  o[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4); /* mn 4..7 */
  memcpy(sc, o, 8);
  memcpy(mn, o + 2, 8);
}

/* A super-block unpacked: codes in c[8] (32 weights each, in element order), per-chunk scale
   vectors in scv[8] (int16: the scale of each weight's group of 16), the group weights of
   the sums in mn16 (16 int16), d, dmin. */
typedef struct {
  __m256i c[8];
  SD_ALIGN(32) __m256i scv[8];
  __m256i mn16;
  float d, dmin;
} kblock;

SD_INLINE void unpack_k(int type, const uint8_t* blk, kblock* k) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if (type == SD_Q6_K) {
    const blk_q6_K* b = (const blk_q6_K*)blk;
    const __m256i m2 = _mm256_set1_epi8(0x03);
    for (int half = 0; half < 2; half++) {
      const __m256i l0 = _mm256_loadu_si256((const __m256i*)(b->ql + 64 * half));
      const __m256i l1 = _mm256_loadu_si256((const __m256i*)(b->ql + 64 * half + 32));
      const __m256i h = _mm256_loadu_si256((const __m256i*)(b->qh + 32 * half));
      k->c[4 * half + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(h, m2), 4));
      k->c[4 * half + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), m2), 4));
      k->c[4 * half + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 4), m2), 4));
      k->c[4 * half + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 6), m2), 4));
    }
    /* int16 scales: sc0..7 in the low lane, sc8..15 in the high one */
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)b->scales));
    const __m256i lo = _mm256_permute2x128_si256(sc, sc, 0x00), hi = _mm256_permute2x128_si256(sc, sc, 0x11);
    for (int c = 0; c < 8; c++) k->scv[c] = splat16(c < 4 ? lo : hi, (2 * c) & 7, (2 * c + 1) & 7);
    k->mn16 = sc;
    k->d = h2f(b->d);
    k->dmin = 0.0f;
    return;
  }
  const int five = type == SD_Q5_K;
  const blk_q4_K* b4 = (const blk_q4_K*)blk;
  const blk_q5_K* b5 = (const blk_q5_K*)blk;
  const uint8_t* qs = five ? b5->qs : b4->qs;
  uint8_t sc[8], mn[8];
  scales_k4(five ? b5->scales : b4->scales, sc, mn);
  const __m256i hb = five ? _mm256_loadu_si256((const __m256i*)b5->qh) : _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi8(1);
  for (int c = 0; c < 4; c++) {
    const __m256i v = _mm256_loadu_si256((const __m256i*)(qs + 32 * c));
    __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if (five) { /* bit 2c of qh[l]: +16 on element 64c+l; bit 2c+1: on element 64c+32+l */
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2 * c + 1), one), 4));
    }
    k->c[2 * c] = lo;
    k->c[2 * c + 1] = hi;
  }
  uint64_t sc64, mn64;
  memcpy(&sc64, sc, 8);
  memcpy(&mn64, mn, 8);
  /* scales as int16 in both lanes; chunk c (sub-block c) takes scale c for all its weights */
  const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_set1_epi64x((long long)sc64));
  for (int c = 0; c < 8; c++) k->scv[c] = splat16(sc16, c, c);
  /* mins for the 16 sums: m_j for sums 2j and 2j+1 */
  const __m128i m8 = _mm_cvtsi64_si128((long long)mn64);
  k->mn16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
  k->d = h2f(five ? b5->d : b4->d);
  k->dmin = h2f(five ? b5->dmin : b4->dmin);
}

SD_INLINE void krow(const kblock* k, const int8_t* x, const int16_t* bs, int32_t* S1, int32_t* S2) {
  __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int c = 0; c < 8; c++) {
    const __m256i p = _mm256_maddubs_epi16(k->c[c], _mm256_loadu_si256((const __m256i*)(x + 32 * c)));
    s = _mm256_add_epi32(s, _mm256_madd_epi16(p, k->scv[c]));
  }
  hsum2(s, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)bs), k->mn16), S1, S2);
}

/* four rows at once: their S1 in lanes 0-3 and S2 in lanes 4-7 of one vector (the horizontal
   sums shared: 9 operations for four rows instead of 16) */
SD_INLINE __m256i krow4(const kblock* k, const int8_t* x0, const int8_t* x1, const int8_t* x2, const int8_t* x3,
                        const int16_t* b0, const int16_t* b1, const int16_t* b2, const int16_t* b3) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
#pragma GCC unroll 8
  for (int c = 0; c < 8; c++) {
    const __m256i q = k->c[c], sc = k->scv[c];
    s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i*)(x0 + 32 * c))), sc));
    s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i*)(x1 + 32 * c))), sc));
    s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i*)(x2 + 32 * c))), sc));
    s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(_mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i*)(x3 + 32 * c))), sc));
  }
  const __m256i t0 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)b0), k->mn16);
  const __m256i t1 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)b1), k->mn16);
  const __m256i t2 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)b2), k->mn16);
  const __m256i t3 = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)b3), k->mn16);
  const __m256i u = _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
  const __m256i v = _mm256_hadd_epi32(_mm256_hadd_epi32(t0, t1), _mm256_hadd_epi32(t2, t3));
  return _mm256_add_epi32(_mm256_permute2x128_si256(u, v, 0x20), _mm256_permute2x128_si256(u, v, 0x31));
}

static void mm_row_k(int type, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y, int64_t ldy) {
  const int64_t nb = K / QKK, ns = K / 16, M4 = M & ~(int64_t)3;
  const int bb = sd_blk_bytes(type), six = type == SD_Q6_K;
  float acc1[4];
  float* acc = M <= 4 ? acc1 : (float*)malloc(sizeof(float) * (size_t)M);
  for (int64_t m = 0; m < M; m++) acc[m] = 0.0f;
  kblock k;
  for (int64_t b = 0; b < nb; b++) {
    unpack_k(type, wrow + b * bb, &k);
    const __m128 d = _mm_set1_ps(k.d), dmin = _mm_set1_ps(k.dmin);
    for (int64_t m = 0; m < M4; m += 4) {
      const int8_t* x = a->qs + m * K + b * QKK;
      const int16_t* bs = a->sums + m * ns + b * 16;
      const __m256i S = krow4(&k, x, x + K, x + 2 * K, x + 3 * K, bs, bs + ns, bs + 2 * ns, bs + 3 * ns);
      const float* dp = a->d + m * nb + b;
      const __m128 dx = _mm_setr_ps(dp[0], dp[nb], dp[2 * nb], dp[3 * nb]);
      const __m128i S1 = _mm256_castsi256_si128(S), S2 = _mm256_extracti128_si256(S, 1);
      __m128 av = _mm_loadu_ps(acc + m);
      if (six) {
        av = _mm_add_ps(av, _mm_mul_ps(_mm_mul_ps(d, dx), _mm_cvtepi32_ps(_mm_sub_epi32(S1, _mm_slli_epi32(S2, 5)))));
      } else {
        av = _mm_add_ps(av, _mm_mul_ps(_mm_mul_ps(d, dx), _mm_cvtepi32_ps(S1)));
        av = _mm_sub_ps(av, _mm_mul_ps(_mm_mul_ps(dmin, dx), _mm_cvtepi32_ps(S2)));
      }
      _mm_storeu_ps(acc + m, av);
    }
    for (int64_t m = M4; m < M; m++) {
      int32_t S1, S2;
      krow(&k, a->qs + m * K + b * QKK, a->sums + m * ns + b * 16, &S1, &S2);
      const float dx = a->d[m * nb + b];
      if (six) {
        acc[m] = acc[m] + (k.d * dx) * (float)(S1 - 32 * S2);
      } else {
        acc[m] = acc[m] + (k.d * dx) * (float)S1;
        acc[m] = acc[m] - (k.dmin * dx) * (float)S2;
      }
    }
  }
  for (int64_t m = 0; m < M; m++) y[m * ldy] = acc[m];
  if (acc != acc1) free(acc);
}

/* ---------------------------------------------------------------- 32-element blocks */

/* 32 bytes, 0xFF where bit e of the 32-bit word is set (element e) */
SD_INLINE __m256i bits_to_bytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits),
      _mm256_setr_epi64x(0x0000000000000000LL, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

typedef struct {
  __m256i c[8];  /* unsigned codes; Q8_0: |w| */
  const int8_t* s[8]; /* Q8_0: w itself, read in place for its sign */
  SD_ALIGN(32) float d[8];
  SD_ALIGN(32) float m[8];
} bgroup;

SD_INLINE void unpack_b(int type, const uint8_t* blocks, int n, bgroup* g) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int i = 0; i < 8; i++) {
    if (i >= n) {
      g->c[i] = _mm256_setzero_si256();
      g->d[i] = g->m[i] = 0.0f;
      continue;
    }
    g->m[i] = 0.0f;
    switch (type) {
      case SD_Q4_0: case SD_Q4_1: {
        const uint8_t* qs;
        if (type == SD_Q4_0) {
          const blk_q4_0* b = (const blk_q4_0*)blocks + i;
          g->d[i] = h2f(b->d);
          qs = b->qs;
        } else {
          const blk_q4_1* b = (const blk_q4_1*)blocks + i;
          g->d[i] = h2f(b->d);
          g->m[i] = h2f(b->m);
          qs = b->qs;
        }
        const __m128i v = _mm_loadu_si128((const __m128i*)qs);
        g->c[i] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
        break;
      }
      case SD_Q5_0: case SD_Q5_1: {
        const uint8_t *qs, *qh8;
        if (type == SD_Q5_0) {
          const blk_q5_0* b = (const blk_q5_0*)blocks + i;
          g->d[i] = h2f(b->d);
          qs = b->qs;
          qh8 = b->qh;
        } else {
          const blk_q5_1* b = (const blk_q5_1*)blocks + i;
          g->d[i] = h2f(b->d);
          g->m[i] = h2f(b->m);
          qs = b->qs;
          qh8 = b->qh;
        }
        uint32_t qh;
        memcpy(&qh, qh8, 4);
        const __m128i v = _mm_loadu_si128((const __m128i*)qs);
        const __m256i lo = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), m4);
        g->c[i] = _mm256_or_si256(lo, _mm256_and_si256(bits_to_bytes(qh), _mm256_set1_epi8(0x10)));
        break;
      }
      default: { /* Q8_0 */
        const blk_q8_0* b = (const blk_q8_0*)blocks + i;
        g->d[i] = h2f(b->d);
        g->s[i] = b->qs;
        g->c[i] = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i*)b->qs),
                                   _mm256_loadu_si256((const __m256i*)b->qs)); /* |w| */
        break;
      }
    }
  }
}

static void mm_row_b(int type, const uint8_t* wrow, int64_t K, const sd_act* a, int64_t M, float* y, int64_t ldy) {
  const int64_t nb = K / QK, ng = (nb + 7) / 8, ns = K / 16;
  const int bb = sd_blk_bytes(type);
  const int off = type == SD_Q4_0 ? 8 : type == SD_Q5_0 ? 16 : 0;
  const int with_min = type == SD_Q4_1 || type == SD_Q5_1, q8 = type == SD_Q8_0;
  float lanes1[16]; /* 8 lanes a row (heap: no alignment promise, so unaligned loads) */
  float* lanes = M <= 2 ? lanes1 : (float*)malloc(sizeof(float) * 8 * (size_t)M);
  for (int64_t i = 0; i < 8 * M; i++) lanes[i] = 0.0f;
  bgroup g;
  for (int64_t gi = 0; gi < ng; gi++) {
    const int n = nb - 8 * gi < 8 ? (int)(nb - 8 * gi) : 8;
    unpack_b(type, wrow + 8 * gi * bb, n, &g);
    const __m256 dw = _mm256_load_ps(g.d), mw = _mm256_load_ps(g.m);
    for (int64_t m = 0; m < M; m++) {
      const int8_t* x = a->qs + m * K + gi * 256;
      __m256i v[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; i++) {
        if (i < n) {
          __m256i xv = _mm256_loadu_si256((const __m256i*)(x + 32 * i));
          if (q8) xv = _mm256_sign_epi8(xv, _mm256_loadu_si256((const __m256i*)g.s[i]));
          v[i] = dot_u8s8(g.c[i], xv);
        } else {
          v[i] = _mm256_setzero_si256();
        }
      }
      __m256i S = hsum8x8(v);
      __m256i X;
      __m256 dx;
      if (n == 8) {
        X = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i*)(a->sums + m * ns + gi * 16)), _mm256_set1_epi16(1));
        dx = _mm256_loadu_ps(a->d + m * nb + gi * 8);
      } else { /* a row's last, partial group: read only its own blocks */
        SD_ALIGN(32) int16_t s16[16] = {0};
        SD_ALIGN(32) float d8[8] = {0};
        memcpy(s16, a->sums + m * ns + gi * 16, sizeof(int16_t) * 2 * n);
        memcpy(d8, a->d + m * nb + gi * 8, sizeof(float) * n);
        X = _mm256_madd_epi16(_mm256_load_si256((const __m256i*)s16), _mm256_set1_epi16(1));
        dx = _mm256_load_ps(d8);
      }
      if (off) S = _mm256_sub_epi32(S, _mm256_slli_epi32(X, off == 8 ? 3 : 4));
      __m256 t = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(S));
      if (with_min) t = _mm256_add_ps(t, _mm256_mul_ps(_mm256_mul_ps(mw, dx), _mm256_cvtepi32_ps(X)));
      _mm256_storeu_ps(lanes + 8 * m, _mm256_add_ps(_mm256_loadu_ps(lanes + 8 * m), t));
    }
  }
  for (int64_t m = 0; m < M; m++) y[m * ldy] = tree8_v(_mm256_loadu_ps(lanes + 8 * m));
  if (lanes != lanes1) free(lanes);
}
