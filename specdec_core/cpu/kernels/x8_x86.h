/* The interleaved ("x8", sdcpu.h) matmuls on x86-64: AVX2, AVX-VNNI, AVX512-VNNI. Included by
   quants.c after dot_x86.h, and by x8_narrow.c (the avx512vnni build's ymm copy).

   One register holds 8 weight rows x 4 codes (the avx512vnni build: two groups, 16 rows), each
   activation row's 4 codes broadcast against it: output row r lives in 32-bit lane r from the
   first product to the last float, so nothing is summed across lanes, and every float step is
   dot_portable.h's, lane by lane. What an extra activation row costs, per 32 codes of 8 rows:
     AVX2      vpmaddubsw into an int16 sum that runs over a whole scale unit (Q4_K: 8
               registers, Q6_K: 2), one vpmaddwd with the 8 rows' scales per unit: ~9 multiply
               operations per 256 products where the row-major layout takes 16;
     VNNI      vpdpbusd straight into int32, one vpmulld with the scales per unit.
   int16 bounds of the AVX2 sums (activation codes |x| <= 127, so no vpmaddubsw pair saturates):
     Q4_K / Q4_0  codes 0..15: 16 products per int16 lane <= 16 * 15 * 127 = 30480
     Q5_0         codes 0..31:  8 products             <=  8 * 31 * 127 = 31496
     Q6_K         codes 0..63:  4 products             <=  4 * 63 * 127 = 32004
     Q8_0         signed codes: |w| <= 128 against sign(x, w), 2 products <= 2 * 128 * 127 =
                  32512, widened to int32 at once (VNNI: w + 128 unsigned, S = sum - 128 X)
   Every int32 sum is exact (|S1| < 2^28), so the lane layout cannot change a result. */

#if defined(SD_SIMDE_VNNI) && SD_VNNI == 1
#include <simde/x86/avx512.h>
#elif defined(SD_SIMDE_VNNI)
#include <simde/x86/avx512/dpwssd.h>
#endif

/* groups of 8 rows per register: the avx512vnni build works on zmm registers, two groups, and
   also compiles this file on ymm registers (SD_XG 1: x8_narrow.c) */
#if defined(SD_XG)
#define XG SD_XG
#elif SD_VNNI == 1
#define XG 2
#else
#define XG 1
#endif
#if defined(SD_VNNI)
#define X_DP 1 /* products by vpdpbusd (both VNNI builds) */
#else
#define X_DP 0
#endif

#if XG == 2
typedef __m512i xvi;
typedef __m512 xvf;
#define xv_load(p) _mm512_load_si512((const void*)(p))
#define xv_zero() _mm512_setzero_si512()
#define xv_set1(v) _mm512_set1_epi32(v)
#define xv_add16 _mm512_add_epi16
#define xv_add32 _mm512_add_epi32
#define xv_sub32 _mm512_sub_epi32
#define xv_slli32 _mm512_slli_epi32
#define xv_maddubs _mm512_maddubs_epi16
#define xv_madd _mm512_madd_epi16
#define xv_mullo _mm512_mullo_epi32
#define xv_dpbusd _mm512_dpbusd_epi32
#define xv_dpwssd _mm512_dpwssd_epi32
#define xf_load(p) _mm512_load_ps(p)
#define xf_store(p, v) _mm512_store_ps(p, v)
#define xf_set1 _mm512_set1_ps
#define xf_zero _mm512_setzero_ps
#define xf_add _mm512_add_ps
#define xf_sub _mm512_sub_ps
#define xf_mul _mm512_mul_ps
#if defined(SD_SIMDE_VNNI) /* SIMDe has no _mm512_cvtepi32_ps: two halves (the same roundings) */
SD_INLINE __m512 xf_cvt(__m512i v) {
  return _mm512_castpd_ps(_mm512_insertf64x4(
      _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_cvtepi32_ps(_mm512_castsi512_si256(v)))),
      _mm256_castps_pd(_mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(v, 1))), 1));
}
#else
#define xf_cvt _mm512_cvtepi32_ps
#endif
/* two groups' 32-byte halves into one register */
#define xv_flip(v) _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80)) /* signed codes + 128 */
SD_INLINE xvi xv_pair(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
SD_INLINE xvf xf_pair(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}
#else
typedef __m256i xvi;
typedef __m256 xvf;
#define xv_load(p) _mm256_load_si256((const __m256i*)(p))
#define xv_zero() _mm256_setzero_si256()
#define xv_set1(v) _mm256_set1_epi32(v)
#define xv_add16 _mm256_add_epi16
#define xv_add32 _mm256_add_epi32
#define xv_sub32 _mm256_sub_epi32
#define xv_slli32 _mm256_slli_epi32
#define xv_maddubs _mm256_maddubs_epi16
#define xv_madd _mm256_madd_epi16
#define xv_mullo _mm256_mullo_epi32
#if SD_VNNI == 2 && !defined(SD_SIMDE_VNNI)
#define xv_dpbusd _mm256_dpbusd_avx_epi32
#define xv_dpwssd _mm256_dpwssd_avx_epi32
#else
#define xv_dpbusd _mm256_dpbusd_epi32
#define xv_dpwssd _mm256_dpwssd_epi32
#endif
#define xf_load(p) _mm256_load_ps(p)
#define xf_store(p, v) _mm256_store_ps(p, v)
#define xf_set1 _mm256_set1_ps
#define xf_zero _mm256_setzero_ps
#define xf_add _mm256_add_ps
#define xf_sub _mm256_sub_ps
#define xf_mul _mm256_mul_ps
#define xf_cvt _mm256_cvtepi32_ps
#define xv_flip(v) _mm256_xor_si256(v, _mm256_set1_epi8((char)0x80)) /* signed codes + 128 */
SD_INLINE xvi xv_pair(__m256i lo, __m256i hi) { (void)hi; return lo; }
SD_INLINE xvf xf_pair(__m256 lo, __m256 hi) { (void)hi; return lo; }
#endif

/* SD_KEEP (sdcpu.h) for these registers; SIMDe's emulated zmm are structs in memory */
#if XG == 2 && defined(SD_SIMDE_VNNI)
#define X_KEEP(v) (void)(v)
#elif XG == 2 && defined(__GNUC__)
#define X_KEEP(v) __asm__("" : "+v"(v))
#else
#define X_KEEP(v) SD_KEEP(v)
#endif

/* 4 activation codes at p, in every lane (a broadcast load) */
SD_INLINE xvi xv_bcast4(const int8_t* p) {
  int32_t v;
  memcpy(&v, p, 4);
  return xv_set1(v);
}

/* acc + the products of codes c and the 4 activation codes at p, broadcast to every lane. The
   avx512vnni build folds the broadcast into the product: one vpdpbusd with a {1to16} / {1to8}
   memory operand, where a vpbroadcastd of its own costs a vector-pipe slot on some cores (the
   AMD Zen 4 VM: an extra activation row of a 2-4-row pass 0.3-0.4 of a one-row step; speed
   notes, item 74). GCC does not fold it by itself. The same products, so the same numbers.
   The K-quants' many-row unit (kx8_rows) keeps its own broadcasts: folded there, its 5-8-row
   passes measured 2-27% slower. */
#if X_DP && SD_VNNI == 1 && !defined(SD_SIMDE_VNNI) && defined(__GNUC__)
#define X_EMBED 1
typedef int32_t x_i32a __attribute__((may_alias));
SD_INLINE __m512i z_dot4m(__m512i acc, __m512i c, const int8_t* p) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(c), "m"(*(const x_i32a*)p));
  return acc;
}
SD_INLINE __m256i y_dot4m(__m256i acc, __m256i c, const int8_t* p) {
  __asm__("vpdpbusd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(c), "m"(*(const x_i32a*)p));
  return acc;
}
#else
#define X_EMBED 0
#endif

#if X_DP
/* acc + the products of codes c and the 4 activation codes at p (VNNI builds) */
SD_INLINE xvi xv_dot4(xvi acc, xvi c, const int8_t* p) {
#if X_EMBED && XG == 2
  return z_dot4m(acc, c, p);
#elif X_EMBED
  return y_dot4m(acc, c, p);
#else
  return xv_dpbusd(acc, c, xv_bcast4(p));
#endif
}
#endif

/* 2 activation sums at p, in every lane */
SD_INLINE xvi xv_bcast2x16(const int16_t* p) { return xv_bcast4((const int8_t*)p); }

/* the 8 fp16 at p as floats */
SD_INLINE __m256 h8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }

/* ---------------------------------------------------------------- K-quants (Q4_K, Q6_K)
   A super-block of every group in a unit is decoded once into `kx8` (codes one byte each, the
   scales as the products want them), then every activation row of the pass reads it from L1. */

typedef struct {
  SD_ALIGN(64) uint8_t codes[64][XG][32]; /* chunk c: elements 4c..4c+3 of 8 rows (x XG groups) */
#if X_DP
  SD_ALIGN(64) int32_t sc[16][XG][8]; /* scale unit u's scale of each row (vpmulld) */
#else
  SD_ALIGN(64) int16_t sc[16][XG][16]; /* the same, twice in each lane (vpmaddwd) */
#endif
  /* S2's weights, int16 pairs against two of the activation's sums: Q6_K's scales (sc_2p, sc_2p+1)
     against the 16-code sums 2p, 2p+1 (p < 8); Q4_K's mins (mn_2p, mn_2p+1) against the 32-code
     sums 2p, 2p+1 (p < 4, sd_act.sums32): pairing each min with itself, as before, took twice the
     vpdpwssd, and S2 was a sixth of a 64-row Q4_K matmul's time (speed notes, item 88) */
  SD_ALIGN(64) int16_t wsum[8][XG][16];
  SD_ALIGN(64) float d[XG][8], dmin[XG][8];
} kx8;

/* 8 rows' bytes at p as one scale vector of kx8.sc (unsigned: Q4_K, signed: Q6_K) */
SD_INLINE void kx8_scale(const uint8_t* p, int is_signed, void* out) {
  const __m128i b = _mm_loadl_epi64((const __m128i*)p);
  const __m256i v = is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
#if X_DP
  _mm256_store_si256((__m256i*)out, v);
#else
  _mm256_store_si256((__m256i*)out, _mm256_blend_epi16(v, _mm256_slli_epi32(v, 16), 0xAA));
#endif
}

/* S2's weights from 16 bytes at p, units 2q and 2q+1 of 8 rows each ([unit][row], as Q6_K's
   scales and kx8_q4_K_scales's mins are stored): lane r holds the int16 pair (row r of unit
   2q, row r of unit 2q+1), for one vpdpwssd against the activation's sums 2q, 2q+1 */
SD_INLINE __m256i kx8_wpairs(const uint8_t* p, int is_signed) {
  const __m128i t = _mm_loadu_si128((const __m128i*)p);
  const __m128i pairs = _mm_unpacklo_epi8(t, _mm_srli_si128(t, 8));
  return is_signed ? _mm256_cvtepi8_epi16(pairs) : _mm256_cvtepu8_epi16(pairs);
}

/* the activation's sums S2 takes, rows m0.. at super-block b (kx8_sums_ld apart): Q4_K's mins
   against the 32-code sums (one vpdpwssd per two mins, speed notes items 88 and 111), Q6_K's
   scales against the 16-code ones */
SD_INLINE const int16_t* kx8_sums(const int TYPE, const sd_act* a, int64_t m0, int64_t b) {
  return TYPE == SD_Q4_K ? a->sums32 + m0 * (a->K / 32) + b * 8 : a->sums + m0 * (a->K / 16) + b * 16;
}
SD_INLINE int64_t kx8_sums_ld(const int TYPE, int64_t K) { return TYPE == SD_Q4_K ? K / 32 : K / 16; }

/* an x8 Q4_K super-block's 6-bit scales and mins, unpacked (see sd_repack): sc[8 j + r] and
   mn[8 j + r], sub-block j of row r -- the low nibbles of scale | min, then their top two bits */
SD_INLINE void kx8_q4_K_scales(const x8_q4_K* x, uint8_t sc[64], uint8_t mn[64]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03), m30 = _mm256_set1_epi8(0x30);
  const __m256i l0 = _mm256_loadu_si256((const __m256i*)x->scales);
  const __m256i l1 = _mm256_loadu_si256((const __m256i*)(x->scales + 32));
  const __m256i hb = _mm256_loadu_si256((const __m256i*)(x->scales + 64));
  _mm256_store_si256((__m256i*)sc, _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4)));
  _mm256_store_si256((__m256i*)(sc + 32), _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(hb, m30)));
  _mm256_store_si256((__m256i*)mn, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                                                   _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(0x0C)), 2)));
  _mm256_store_si256((__m256i*)(mn + 32), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                                          _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)));
}

/* an x8 Q6_K super-block's codes (0..63) of chunks 32h + 8p + k, p = 0..3, for 8 rows: quarter p
   of half h. qh's bit pairs 0-1, 2-3, 4-5, 6-7 are the top bits of elements +0, +32, +64, +96 */
SD_INLINE void kx8_q6_K_codes(const x8_q6_K* x, int h, int k, __m256i c[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
  const __m256i l0 = _mm256_loadu_si256((const __m256i*)(x->ql + ((2 * h) * 8 + k) * 32));
  const __m256i l1 = _mm256_loadu_si256((const __m256i*)(x->ql + ((2 * h + 1) * 8 + k) * 32));
  const __m256i hb = _mm256_loadu_si256((const __m256i*)(x->qh + (h * 8 + k) * 32));
  c[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30));
  c[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30));
  c[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30));
  c[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30));
}

SD_INLINE void kx8_decode(const int TYPE, const uint8_t* blk, kx8* s, int gi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if (TYPE == SD_Q4_K) {
    const x8_q4_K* x = (const x8_q4_K*)blk;
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++)
#pragma GCC unroll 8
      for (int k = 0; k < 8; k++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i*)(x->qs + (c * 8 + k) * 32));
        _mm256_store_si256((__m256i*)s->codes[16 * c + k][gi], _mm256_and_si256(raw, m4));
        _mm256_store_si256((__m256i*)s->codes[16 * c + 8 + k][gi], _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4));
      }
    SD_ALIGN(32) uint8_t sc[64], mn[64]; /* [j][row] */
    kx8_q4_K_scales(x, sc, mn);
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) kx8_scale(sc + 8 * j, 0, s->sc[j][gi]);
    /* S2 = sum over the 8 scale units j of mn[j] * sums32[j]: pairs (mn_2p, mn_2p+1) */
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) _mm256_store_si256((__m256i*)s->wsum[p][gi], kx8_wpairs(mn + 16 * p, 0));
    _mm256_store_ps(s->d[gi], h8(x->d));
    _mm256_store_ps(s->dmin[gi], h8(x->dmin));
    return;
  }
  const x8_q6_K* x = (const x8_q6_K*)blk;
#pragma GCC unroll 2
  for (int h = 0; h < 2; h++)
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      __m256i c[4];
      kx8_q6_K_codes(x, h, k, c);
#pragma GCC unroll 4
      for (int p = 0; p < 4; p++) _mm256_store_si256((__m256i*)s->codes[32 * h + 8 * p + k][gi], c[p]);
    }
  const uint8_t* scales = (const uint8_t*)x->scales;
#pragma GCC unroll 16
  for (int g = 0; g < 16; g++) kx8_scale(scales + 8 * g, 1, s->sc[g][gi]);
#pragma GCC unroll 8
  for (int p = 0; p < 8; p++) /* S2 = sum over g of sc[g] * sums[g]: pairs (sc_2p, sc_2p+1) */
    _mm256_store_si256((__m256i*)s->wsum[p][gi], kx8_wpairs(scales + 16 * p, 1));
  _mm256_store_ps(s->d[gi], h8(x->d));
  _mm256_store_ps(s->dmin[gi], _mm256_setzero_ps());
}

/* R activation rows (x: row 0's codes of this super-block, rows ldx apart; bs: their sums, ldb
   apart: Q6_K the 16-code sums, Q4_K the 32-code ones) against a decoded super-block: each
   row's S1 and S2 in the rows' lanes */
SD_INLINE void kx8_rows(const int TYPE, const int R, const kx8* s, const int8_t* x, int64_t ldx, const int16_t* bs,
                        int64_t ldb, xvi S1[8], xvi S2[8]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) S1[r] = S2[r] = xv_zero();
  /* a scale unit: 8 chunks (Q4_K, 32 elements) or 4 (Q6_K, 16); AVX2's int16 sums take 8 or 2 */
  const int units = TYPE == SD_Q4_K ? 8 : 16, per = TYPE == SD_Q4_K ? 8 : 4;
#if !X_DP
  const int run = TYPE == SD_Q4_K ? 8 : 2;
#endif
  for (int u = 0; u < units; u++) {
    const xvi sc = xv_load(s->sc[u]);
#if X_DP
    xvi t[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) t[r] = xv_zero();
#pragma GCC unroll 8
    for (int c = 0; c < per; c++) {
      const xvi code = xv_load(s->codes[u * per + c]);
#pragma GCC unroll 8
      for (int r = 0; r < R; r++) {
        t[r] = xv_dpbusd(t[r], code, xv_bcast4(x + r * ldx + 4 * (u * per + c)));
        X_KEEP(t[r]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) S1[r] = xv_add32(S1[r], xv_mullo(t[r], sc));
#else
#pragma GCC unroll 2
    for (int c0 = 0; c0 < per; c0 += run) {
      xvi t[8];
#pragma GCC unroll 8
      for (int r = 0; r < R; r++) t[r] = xv_zero();
#pragma GCC unroll 8
      for (int c = c0; c < c0 + run; c++) {
        const xvi code = xv_load(s->codes[u * per + c]);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
          t[r] = xv_add16(t[r], xv_maddubs(code, xv_bcast4(x + r * ldx + 4 * (u * per + c))));
          X_KEEP(t[r]);
        }
      }
#pragma GCC unroll 8
      for (int r = 0; r < R; r++) {
        S1[r] = xv_add32(S1[r], xv_madd(t[r], sc));
        X_KEEP(S1[r]);
      }
    }
#endif
  }
  const int pairs = TYPE == SD_Q4_K ? 4 : 8;
#pragma GCC unroll 8
  for (int p = 0; p < pairs; p++) {
    const xvi wv = xv_load(s->wsum[p]);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
#if X_DP
      S2[r] = xv_dpwssd(S2[r], wv, xv_bcast2x16(bs + r * ldb + 2 * p));
#else
      S2[r] = xv_add32(S2[r], xv_madd(wv, xv_bcast2x16(bs + r * ldb + 2 * p)));
#endif
    }
  }
}

/* the rows' float accumulators (acc: row m at acc + m * 8 * XG) += this super-block */
SD_INLINE void kx8_finish(const int TYPE, const int R, const kx8* s, const xvi S1[8], const xvi S2[8], const float* dx,
                          int64_t nb, float* acc) {
  const xvf d = xf_load(s->d[0]), dmin = xf_load(s->dmin[0]);
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) {
    const xvf dxv = xf_set1(dx[r * nb]);
    xvf v = xf_load(acc + r * 8 * XG);
    if (TYPE == SD_Q6_K) {
      v = xf_add(v, xf_mul(xf_mul(d, dxv), xf_cvt(xv_sub32(S1[r], xv_slli32(S2[r], 5)))));
    } else {
      v = xf_add(v, xf_mul(xf_mul(d, dxv), xf_cvt(S1[r])));
      v = xf_sub(v, xf_mul(xf_mul(dmin, dxv), xf_cvt(S2[r])));
    }
    xf_store(acc + r * 8 * XG, v);
  }
}

#if XG == 2 && defined(SD_SIMDE_VNNI)
#define X_ROWS 2 /* the tests' emulated build: the same code for fewer rows, a fraction of the compile */
#elif XG == 2
#define X_ROWS 8 /* activation rows multiplied together (registers: 2 per row + code) */
#else
#define X_ROWS 4
#endif

/* acc [M][8 XG] for units of XG groups starting at group g (ng of them real) */
SD_INLINE void kx8_unit(const int TYPE, const sd_mat* w, const sd_act* a, int64_t M, int64_t g, int ng, float* acc) {
  const int64_t K = w->cols, nb = K / QKK;
  const size_t xb = TYPE == SD_Q4_K ? sizeof(x8_q4_K) : sizeof(x8_q6_K);
  SD_ALIGN(64) kx8 s;
  for (int64_t i = 0; i < M * 8 * XG; i++) acc[i] = 0.0f;
  for (int64_t b = 0; b < nb; b++) {
    for (int gi = 0; gi < XG; gi++) { /* a missing second group: the first again, its lanes unused */
      const uint8_t* blk = (const uint8_t*)w->data + ((g + (gi < ng ? gi : 0)) * nb + b) * xb;
      sd_prefetch_l2(blk + 2 * xb, xb); /* two blocks ahead into L2 (sdcpu.h); past a group's last: the next group's */
      kx8_decode(TYPE, blk, &s, gi);
    }
    for (int64_t m0 = 0; m0 < M; m0 += X_ROWS) {
      xvi S1[8], S2[8];
      const int8_t* x = a->qs + m0 * K + b * QKK;
      const int16_t* bs = kx8_sums(TYPE, a, m0, b);
      const int64_t ldb = kx8_sums_ld(TYPE, K);
      const float* dx = a->d + m0 * nb + b;
      float* ac = acc + m0 * 8 * XG;
      switch (M - m0 < X_ROWS ? M - m0 : X_ROWS) {
#define KX8_CASE(R) case R: kx8_rows(TYPE, R, &s, x, K, bs, ldb, S1, S2); kx8_finish(TYPE, R, &s, S1, S2, dx, nb, ac); break;
#if X_ROWS == 8
        KX8_CASE(8) KX8_CASE(7) KX8_CASE(6) KX8_CASE(5)
#endif
#if X_ROWS >= 4
        KX8_CASE(4) KX8_CASE(3)
#endif
        KX8_CASE(2) KX8_CASE(1)
#undef KX8_CASE
        default: break;
      }
    }
  }
}

#if X_DP && XG == 2
#define X_PAIR 1
/* Two units (32 weight rows) against R activation rows: each broadcast of 4 activation codes
   feeds two products instead of one. One product a broadcast left the zmm build at ~54% of
   this core's vpdpbusd rate with its operands in L1 (the broadcast loads, not the products,
   set the pace); two, at 6 rows (12 chains, 24 sums + 2 codes + the broadcast in the 32
   registers), ~61% (speed notes, item 107). The same integer sums per unit and row, so the
   same numbers. */
#if defined(SD_SIMDE_VNNI)
#define X_PAIR_ROWS 3 /* the tests' emulated build: the same code in tiles of 2-3 rows, a fraction of the compile */
#else
#define X_PAIR_ROWS 6
#endif
SD_INLINE void kx8_rows_pair(const int TYPE, const int R, const kx8* sa, const kx8* sb, const int8_t* x, int64_t ldx,
                             const int16_t* bs, int64_t ldb, xvi S1a[8], xvi S1b[8], xvi S2a[8], xvi S2b[8]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) S1a[r] = S1b[r] = xv_zero();
  const int units = TYPE == SD_Q4_K ? 8 : 16, per = TYPE == SD_Q4_K ? 8 : 4;
  for (int u = 0; u < units; u++) {
    xvi ta[8], tb[8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) ta[r] = tb[r] = xv_zero();
#pragma GCC unroll 8
    for (int c = 0; c < per; c++) {
      const xvi ca = xv_load(sa->codes[u * per + c]), cb = xv_load(sb->codes[u * per + c]);
#pragma GCC unroll 8
      for (int r = 0; r < R; r++) {
        const xvi xr = xv_bcast4(x + r * ldx + 4 * (u * per + c));
        ta[r] = xv_dpbusd(ta[r], ca, xr);
        tb[r] = xv_dpbusd(tb[r], cb, xr);
        X_KEEP(ta[r]);
        X_KEEP(tb[r]);
      }
    }
    const xvi sca = xv_load(sa->sc[u]), scb = xv_load(sb->sc[u]);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      S1a[r] = xv_add32(S1a[r], xv_mullo(ta[r], sca));
      S1b[r] = xv_add32(S1b[r], xv_mullo(tb[r], scb));
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; r++) S2a[r] = S2b[r] = xv_zero();
  const int pairs = TYPE == SD_Q4_K ? 4 : 8;
#pragma GCC unroll 8
  for (int p = 0; p < pairs; p++) {
    const xvi wa = xv_load(sa->wsum[p]), wb = xv_load(sb->wsum[p]);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
      const xvi br = xv_bcast2x16(bs + r * ldb + 2 * p);
      S2a[r] = xv_dpwssd(S2a[r], wa, br);
      S2b[r] = xv_dpwssd(S2b[r], wb, br);
    }
  }
}

/* acc [M][8 XG] of the unit at group g and acc2 the same of the unit at g + XG, both whole */
SD_INLINE void kx8_unit_pair(const int TYPE, const sd_mat* w, const sd_act* a, int64_t M, int64_t g, float* acc,
                             float* acc2) {
  const int64_t K = w->cols, nb = K / QKK;
  const size_t xb = TYPE == SD_Q4_K ? sizeof(x8_q4_K) : sizeof(x8_q6_K);
  SD_ALIGN(64) kx8 s[2];
  for (int64_t i = 0; i < M * 8 * XG; i++) acc[i] = acc2[i] = 0.0f;
  /* row tiles as even as X_PAIR_ROWS allows: 8 rows as 4 + 4, not 6 + 2 */
  const int64_t tiles = (M + X_PAIR_ROWS - 1) / X_PAIR_ROWS;
  for (int64_t b = 0; b < nb; b++) {
    for (int h = 0; h < 2; h++)
      for (int gi = 0; gi < XG; gi++) {
        const uint8_t* blk = (const uint8_t*)w->data + ((g + h * XG + gi) * nb + b) * xb;
        sd_prefetch_l2(blk + 2 * xb, xb);
        kx8_decode(TYPE, blk, &s[h], gi);
      }
    for (int64_t t = 0, m0 = 0; t < tiles; t++) {
      const int R = (int)((M - m0) / (tiles - t) + ((M - m0) % (tiles - t) != 0));
      xvi S1a[8], S1b[8], S2a[8], S2b[8];
      const int8_t* x = a->qs + m0 * K + b * QKK;
      const int16_t* bs = kx8_sums(TYPE, a, m0, b);
      const int64_t ldb = kx8_sums_ld(TYPE, K);
      const float* dx = a->d + m0 * nb + b;
      switch (R) {
#define KX8_PAIR_CASE(RR)                                                             \
  case RR:                                                                            \
    kx8_rows_pair(TYPE, RR, &s[0], &s[1], x, K, bs, ldb, S1a, S1b, S2a, S2b);         \
    kx8_finish(TYPE, RR, &s[0], S1a, S2a, dx, nb, acc + m0 * 8 * XG);                 \
    kx8_finish(TYPE, RR, &s[1], S1b, S2b, dx, nb, acc2 + m0 * 8 * XG);                \
    break;
#if X_PAIR_ROWS == 6
        KX8_PAIR_CASE(6) KX8_PAIR_CASE(5) KX8_PAIR_CASE(4) KX8_PAIR_CASE(3)
#else
        KX8_PAIR_CASE(3) KX8_PAIR_CASE(2)
#endif
#undef KX8_PAIR_CASE
        default: break; /* tiles of 3..6 rows (2..3 emulated): M >= 5 here */
      }
      m0 += R;
    }
  }
}
#else
#define X_PAIR 0
#endif

/* ---------------------------------------------------------------- one activation row (K-quants)
   A one-row pass reads each block once and is memory-bound: codes go straight from the block
   into the products, one group (ymm) at a time in every build, no scratch written and read. */

#if X_DP && SD_VNNI == 2 && !defined(SD_SIMDE_VNNI)
#define y_dpbusd _mm256_dpbusd_avx_epi32
#define y_dpwssd _mm256_dpwssd_avx_epi32
#else
#define y_dpbusd _mm256_dpbusd_epi32
#define y_dpwssd _mm256_dpwssd_epi32
#endif

/* acc + the products of codes c and the 4 activation codes at p, broadcast: int16 sums (AVX2)
   or int32 (VNNI; the avx512vnni build with the broadcast inside the product) */
SD_INLINE __m256i y_dot4(__m256i acc, __m256i c, const int8_t* p) {
#if X_EMBED
  return y_dot4m(acc, c, p);
#else
  int32_t v;
  memcpy(&v, p, 4);
#if X_DP
  return y_dpbusd(acc, c, _mm256_set1_epi32(v));
#else
  return _mm256_add_epi16(acc, _mm256_maddubs_epi16(c, _mm256_set1_epi32(v)));
#endif
#endif
}

/* S1 + t times the 8 rows' scales at p (8 bytes, unsigned or signed) */
SD_INLINE __m256i y_scale(__m256i S1, __m256i t, const uint8_t* p, int is_signed) {
  const __m128i b = _mm_loadl_epi64((const __m128i*)p);
  const __m256i v = is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b);
#if X_DP
  return _mm256_add_epi32(S1, _mm256_mullo_epi32(t, v));
#else
  return _mm256_add_epi32(S1, _mm256_madd_epi16(t, _mm256_blend_epi16(v, _mm256_slli_epi32(v, 16), 0xAA)));
#endif
}

/* S2 + w . (the activation's sums 2p, 2p+1), w: int16 pairs */
SD_INLINE __m256i y_sums(__m256i S2, __m256i w, const int16_t* bs) {
  int32_t v;
  memcpy(&v, bs, 4);
#if X_DP
  return y_dpwssd(S2, w, _mm256_set1_epi32(v));
#else
  return _mm256_add_epi32(S2, _mm256_madd_epi16(w, _mm256_set1_epi32(v)));
#endif
}

/* the 8 rows' code chunk for elements e..e+3 of super-block blk (chunk index e / 4) */
SD_INLINE __m256i kx8_chunk(const int TYPE, const uint8_t* blk, int e) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if (TYPE == SD_Q4_K) { /* sub-block j = e / 32: the low (j even) or high nibbles of chunk (j / 2, k) */
    const int j = e / 32, k = (e % 32) / 4;
    const __m256i raw = _mm256_loadu_si256((const __m256i*)(((const x8_q4_K*)blk)->qs + ((j / 2) * 8 + k) * 32));
    return _mm256_and_si256(j & 1 ? _mm256_srli_epi16(raw, 4) : raw, m4);
  }
  const x8_q6_K* q = (const x8_q6_K*)blk; /* element 128h + 32p + 4k: quarter p of half h */
  const int h = e / 128, p = (e % 128) / 32, k = (e % 32) / 4;
  const __m256i a = _mm256_loadu_si256((const __m256i*)(q->ql + ((2 * h + (p & 1)) * 8 + k) * 32));
  const __m256i hb = _mm256_loadu_si256((const __m256i*)(q->qh + (h * 8 + k) * 32));
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const __m256i lo = _mm256_and_si256(p < 2 ? a : _mm256_srli_epi16(a, 4), m4);
  const __m256i top = p == 0 ? _mm256_slli_epi16(hb, 4) : p == 1 ? _mm256_slli_epi16(hb, 2) : p == 2 ? hb : _mm256_srli_epi16(hb, 2);
  return _mm256_or_si256(lo, _mm256_and_si256(top, m30));
}

/* R activation rows (1..4) against one super-block of a group, codes straight from the block
   (no scratch): what passes of a few rows take. bs: the rows' activation sums, ldb apart, as
   kx8_rows takes them. acc[r] += that super-block's float terms. */
SD_INLINE void kx8_direct(const int TYPE, const int R, const uint8_t* blk, const int8_t* x, int64_t ldx, const int16_t* bs,
                          int64_t ldb, const float* dx, int64_t ldd, __m256 acc[4]) {
  __m256i S1[4], S2[4];
  const int8_t* xr[4];
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    S1[r] = S2[r] = _mm256_setzero_si256();
    xr[r] = x + r * ldx;
    /* four rows: GCC otherwise gives each of the 4 x 64 activation addresses its own induction
       variable, spills them and loads each from the stack before its broadcast (520 stack
       accesses a Q4_K block against 89 for three rows); an opaque row pointer keeps them
       base + offset. A 4-row target pass 1.34 -> 1.23 of a row (speed notes, item 67). */
    if (R == 4) __asm__("" : "+r"(xr[r]));
  }
  const uint8_t* scales = TYPE == SD_Q4_K ? NULL : (const uint8_t*)((const x8_q6_K*)blk)->scales;
  SD_ALIGN(32) uint8_t sc[64], mn[64]; /* Q4_K: [j][row], see kx8_decode */
  if (TYPE == SD_Q4_K) {
    kx8_q4_K_scales((const x8_q4_K*)blk, sc, mn);
    scales = sc;
  }
  /* a scale unit: 32 elements (Q4_K) or 16 (Q6_K); AVX2's int16 sums run over 8 or 2 chunks */
  const int units = TYPE == SD_Q4_K ? 8 : 16, per = TYPE == SD_Q4_K ? 8 : 4;
#if X_DP
  const int run = per;
#else
  const int run = TYPE == SD_Q4_K ? 8 : 2;
#endif
#pragma GCC unroll 16
  for (int u = 0; u < units; u++)
#pragma GCC unroll 4
    for (int c0 = 0; c0 < per; c0 += run) {
      __m256i t[4];
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) t[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int c = c0; c < c0 + run; c++) {
        const int e = 4 * (u * per + c);
        const __m256i code = kx8_chunk(TYPE, blk, e);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
          t[r] = y_dot4(t[r], code, xr[r] + e);
          SD_KEEP(t[r]);
        }
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; r++) S1[r] = y_scale(S1[r], t[r], scales + 8 * u, TYPE == SD_Q6_K);
    }
  /* S2: Q6_K's scales in pairs against its 16-code sums (p < 8), Q4_K's mins against its
     32-code sums (p < 4), as kx8_decode has them */
#pragma GCC unroll 8
  for (int p = 0; p < (TYPE == SD_Q4_K ? 4 : 8); p++) {
    const __m256i wv = TYPE == SD_Q4_K ? kx8_wpairs(mn + 16 * p, 0) : kx8_wpairs(scales + 16 * p, 1);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) S2[r] = y_sums(S2[r], wv, bs + r * ldb + 2 * p);
  }
  const __m256 d = h8(TYPE == SD_Q4_K ? ((const x8_q4_K*)blk)->d : ((const x8_q6_K*)blk)->d);
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) {
    const __m256 dxv = _mm256_set1_ps(dx[r * ldd]);
    if (TYPE == SD_Q6_K) {
      acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(d, dxv), _mm256_cvtepi32_ps(_mm256_sub_epi32(S1[r], _mm256_slli_epi32(S2[r], 5)))));
    } else {
      acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(d, dxv), _mm256_cvtepi32_ps(S1[r])));
      acc[r] = _mm256_sub_ps(acc[r], _mm256_mul_ps(_mm256_mul_ps(h8(((const x8_q4_K*)blk)->dmin), dxv), _mm256_cvtepi32_ps(S2[r])));
    }
  }
}

SD_INLINE void kx8_direct_group(const int TYPE, const int R, const sd_mat* w, const sd_act* a, int64_t g, float* y,
                                int64_t ldy) {
  const int64_t K = w->cols, nb = K / QKK;
  const size_t xb = TYPE == SD_Q4_K ? sizeof(x8_q4_K) : sizeof(x8_q6_K);
  const uint8_t* base = (const uint8_t*)w->data + g * nb * xb;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < nb; b++) {
    sd_prefetch_l2(base + (b + 4) * xb, xb); /* four blocks ahead into L2 (sdcpu.h; a hint: past the end is harmless) */
    kx8_direct(TYPE, R, base + b * xb, a->qs + b * QKK, K, kx8_sums(TYPE, a, 0, b), kx8_sums_ld(TYPE, K), a->d + b, nb,
               acc);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; r++) _mm256_storeu_ps(y + r * ldy + 8 * g, acc[r]);
}

/* ---------------------------------------------------------------- 32-element blocks (Q4_0, Q5_0, Q8_0)
   A block of every group in a unit is decoded into registers (8 chunks), then each activation
   row takes its products; block b's float term goes to lane b mod 8, combined by tree8 at the end. */

SD_INLINE void bx8_codes(const int TYPE, const uint8_t* blk, __m256i c[8]) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  if (TYPE == SD_Q8_0) {
    const x8_q8_0* x = (const x8_q8_0*)blk;
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) c[k] = _mm256_loadu_si256((const __m256i*)(x->qs + 32 * k));
    return;
  }
  const uint8_t* qs = TYPE == SD_Q4_0 ? ((const x8_q4_0*)blk)->qs : ((const x8_q5_0*)blk)->qs;
#pragma GCC unroll 4
  for (int k = 0; k < 4; k++) {
    const __m256i raw = _mm256_loadu_si256((const __m256i*)(qs + 32 * k));
    c[k] = _mm256_and_si256(raw, m4);
    c[k + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
  }
  if (TYPE == SD_Q5_0) { /* bit k of qh's byte: the fifth bit of chunk k's code in that byte */
    const __m256i t = _mm256_loadu_si256((const __m256i*)((const x8_q5_0*)blk)->qh), b4 = _mm256_set1_epi8(0x10);
    c[0] = _mm256_or_si256(c[0], _mm256_and_si256(_mm256_slli_epi16(t, 4), b4));
    c[1] = _mm256_or_si256(c[1], _mm256_and_si256(_mm256_slli_epi16(t, 3), b4));
    c[2] = _mm256_or_si256(c[2], _mm256_and_si256(_mm256_slli_epi16(t, 2), b4));
    c[3] = _mm256_or_si256(c[3], _mm256_and_si256(_mm256_slli_epi16(t, 1), b4));
    c[4] = _mm256_or_si256(c[4], _mm256_and_si256(t, b4));
    c[5] = _mm256_or_si256(c[5], _mm256_and_si256(_mm256_srli_epi16(t, 1), b4));
    c[6] = _mm256_or_si256(c[6], _mm256_and_si256(_mm256_srli_epi16(t, 2), b4));
    c[7] = _mm256_or_si256(c[7], _mm256_and_si256(_mm256_srli_epi16(t, 3), b4));
  }
}

/* one activation row's integer sum S (offsets applied) against the unit's decoded block */
SD_INLINE xvi bx8_row(const int TYPE, const xvi c[8], const xvi w[8], const int8_t* x, int32_t X) {
#if X_DP
  (void)w;
  xvi t = xv_zero();
#pragma GCC unroll 8
  for (int k = 0; k < 8; k++) t = xv_dot4(t, c[k], x + 4 * k);
  const int off = TYPE == SD_Q4_0 ? 8 : TYPE == SD_Q5_0 ? 16 : 128; /* Q8_0: codes + 128 */
  return xv_sub32(t, xv_set1(off * X));
#else
  const xvi ones = xv_set1(0x00010001);
  if (TYPE == SD_Q8_0) {
    xvi t = xv_zero();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) t = xv_add32(t, xv_madd(xv_maddubs(c[k], _mm256_sign_epi8(xv_bcast4(x + 4 * k), w[k])), ones));
    return t;
  }
  if (TYPE == SD_Q4_0) {
    xvi t = xv_zero();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) t = xv_add16(t, xv_maddubs(c[k], xv_bcast4(x + 4 * k)));
    return xv_sub32(xv_madd(t, ones), xv_set1(8 * X));
  }
  xvi t0 = xv_zero(), t1 = xv_zero();
#pragma GCC unroll 4
  for (int k = 0; k < 4; k++) {
    t0 = xv_add16(t0, xv_maddubs(c[k], xv_bcast4(x + 4 * k)));
    t1 = xv_add16(t1, xv_maddubs(c[k + 4], xv_bcast4(x + 16 + 4 * k)));
  }
  return xv_sub32(xv_add32(xv_madd(t0, ones), xv_madd(t1, ones)), xv_set1(16 * X));
#endif
}

/* lanes [M][8][8 XG] for a unit of XG groups starting at group g (ng real) */
SD_INLINE void bx8_unit(const int TYPE, const sd_mat* w, const sd_act* a, int64_t M, int64_t g, int ng, float* lanes) {
  const int64_t K = w->cols, nb = K / QK, ns = K / 16;
  const size_t xb = TYPE == SD_Q4_0 ? sizeof(x8_q4_0) : TYPE == SD_Q5_0 ? sizeof(x8_q5_0) : sizeof(x8_q8_0);
  for (int64_t i = 0; i < M * 64 * XG; i++) lanes[i] = 0.0f;
  for (int64_t b = 0; b < nb; b++) {
    xvi c[8], s[8];
    __m256i cg[XG][8];
    __m256 dg[XG];
    for (int gi = 0; gi < XG; gi++) {
      const uint8_t* blk = (const uint8_t*)w->data + ((g + (gi < ng ? gi : 0)) * nb + b) * xb;
      sd_prefetch(blk + 4 * xb, xb); /* four blocks ahead: 144-272 bytes each */
      bx8_codes(TYPE, blk, cg[gi]);
      dg[gi] = h8((const uint16_t*)blk); /* d[8] leads every x8 block of these types */
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
#if XG == 2
      const xvi v = xv_pair(cg[0][k], cg[1][k]);
#else
      const xvi v = cg[0][k];
#endif
      if (TYPE == SD_Q8_0) {
#if X_DP
        c[k] = xv_flip(v);
#else
        c[k] = _mm256_sign_epi8(v, v);
        s[k] = v;
#endif
      } else {
        c[k] = v;
      }
    }
#if XG == 2
    const xvf d = xf_pair(dg[0], dg[1]);
#else
    const xvf d = dg[0];
#endif
    for (int64_t m = 0; m < M; m++) {
      const int32_t X = (int32_t)a->sums[m * ns + 2 * b] + a->sums[m * ns + 2 * b + 1];
      const xvi S = bx8_row(TYPE, c, s, a->qs + m * K + 32 * b, X);
      float* l = lanes + (m * 8 + (b & 7)) * 8 * XG;
      xf_store(l, xf_add(xf_load(l), xf_mul(xf_mul(d, xf_set1(a->d[m * nb + b])), xf_cvt(S))));
    }
  }
}

/* the 8 float lanes of a group's row in xf_tree8's order (bx8_unit's sum of a row's lanes) */
SD_INLINE __m256 y_tree8(const __m256 l[8]) {
  return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(l[0], l[4]), _mm256_add_ps(l[2], l[6])),
                       _mm256_add_ps(_mm256_add_ps(l[1], l[5]), _mm256_add_ps(l[3], l[7])));
}

/* One activation row, Q4_0: a group (ymm, 8 rows) at a time, codes straight from each block
   into the products and the 8 float lanes in registers -- bx8_unit's numbers (lane b mod 8 of
   row r takes block b's term (d * dx) * S, then the tree8), without its paired zmm codes and
   its lanes in memory, and the block 16 ahead on its way (2.3 KB: 4 blocks ahead kept the
   loads waiting on memory): a one-row pass of Q4_0 read 20 GB/s on one core where Q4_K's
   direct path reads 31; now 27 (speed notes, item 64). */
SD_INLINE void bx8_one_row_q4_0(const sd_mat* w, const sd_act* a, int64_t g, float* y) {
  const int64_t K = w->cols, nb = K / QK, ns = K / 16;
  const uint8_t* base = (const uint8_t*)w->data + g * nb * sizeof(x8_q4_0);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 l[8];
  for (int j = 0; j < 8; j++) l[j] = _mm256_setzero_ps();
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
      const int64_t b = b0 + j;
      if (b >= nb) break;
      const x8_q4_0* blk = (const x8_q4_0*)(base + b * sizeof(x8_q4_0));
      sd_prefetch((const uint8_t*)blk + 16 * sizeof(x8_q4_0), sizeof(x8_q4_0));
      const int8_t* x = a->qs + 32 * b;
      __m256i t = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int k = 0; k < 4; k++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i*)(blk->qs + 32 * k));
        t = y_dot4(t, _mm256_and_si256(raw, m4), x + 4 * k);
        t = y_dot4(t, _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4), x + 16 + 4 * k);
      }
      const int32_t X = (int32_t)a->sums[2 * b] + a->sums[2 * b + 1];
#if X_DP
      const __m256i S = _mm256_sub_epi32(t, _mm256_set1_epi32(8 * X));
#else
      const __m256i S = _mm256_sub_epi32(_mm256_madd_epi16(t, _mm256_set1_epi16(1)), _mm256_set1_epi32(8 * X));
#endif
      l[j] = _mm256_add_ps(l[j], _mm256_mul_ps(_mm256_mul_ps(h8(blk->d), _mm256_set1_ps(a->d[b])), _mm256_cvtepi32_ps(S)));
    }
  }
  (void)ns;
  _mm256_storeu_ps(y + 8 * g, y_tree8(l));
}

#if XG == 2
/* Two activation rows, Q4_0 (the avx512vnni build, whose 32 registers hold both rows' 8 lanes):
   bx8_one_row_q4_0's walk with each decoded chunk taken by both rows -- every lane's float
   steps those of bx8_unit, row by row. After an all-accepted step the draft reads its last
   drafted token and the target's bonus in one pass: through the unit that pass cost ~1.55 of
   a one-row step on the Zen 4 VM (speed notes, item 79). */
SD_INLINE void bx8_two_rows_q4_0(const sd_mat* w, const sd_act* a, int64_t g, float* y, int64_t ldy) {
  const int64_t K = w->cols, nb = K / QK, ns = K / 16;
  const uint8_t* base = (const uint8_t*)w->data + g * nb * sizeof(x8_q4_0);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 l0[8], l1[8];
  for (int j = 0; j < 8; j++) l0[j] = l1[j] = _mm256_setzero_ps();
  const int8_t* x0 = a->qs;
  const int8_t* x1 = a->qs + K;
  for (int64_t b0 = 0; b0 < nb; b0 += 8) {
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) {
      const int64_t b = b0 + j;
      if (b >= nb) break;
      const x8_q4_0* blk = (const x8_q4_0*)(base + b * sizeof(x8_q4_0));
      sd_prefetch((const uint8_t*)blk + 16 * sizeof(x8_q4_0), sizeof(x8_q4_0));
      __m256i t0 = _mm256_setzero_si256(), t1 = _mm256_setzero_si256();
#pragma GCC unroll 4
      for (int k = 0; k < 4; k++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i*)(blk->qs + 32 * k));
        const __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        t0 = y_dot4(t0, lo, x0 + 32 * b + 4 * k);
        t1 = y_dot4(t1, lo, x1 + 32 * b + 4 * k);
        t0 = y_dot4(t0, hi, x0 + 32 * b + 16 + 4 * k);
        t1 = y_dot4(t1, hi, x1 + 32 * b + 16 + 4 * k);
      }
      const int32_t X0 = (int32_t)a->sums[2 * b] + a->sums[2 * b + 1];
      const int32_t X1 = (int32_t)a->sums[ns + 2 * b] + a->sums[ns + 2 * b + 1];
      const __m256 d = h8(blk->d);
      l0[j] = _mm256_add_ps(l0[j], _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(a->d[b])),
                                                 _mm256_cvtepi32_ps(_mm256_sub_epi32(t0, _mm256_set1_epi32(8 * X0)))));
      l1[j] = _mm256_add_ps(l1[j], _mm256_mul_ps(_mm256_mul_ps(d, _mm256_set1_ps(a->d[nb + b])),
                                                 _mm256_cvtepi32_ps(_mm256_sub_epi32(t1, _mm256_set1_epi32(8 * X1)))));
    }
  }
  _mm256_storeu_ps(y + 8 * g, y_tree8(l0));
  _mm256_storeu_ps(y + ldy + 8 * g, y_tree8(l1));
}
#endif

#if SD_AMX
#include "x8_amx.h" /* the K-quants' many-row passes on AMX tiles */
#endif

/* ---------------------------------------------------------------- entry */

SD_INLINE xvf xf_tree8(const float* l) {
  const int W = 8 * XG;
  return xf_add(xf_add(xf_add(xf_load(l), xf_load(l + 4 * W)), xf_add(xf_load(l + 2 * W), xf_load(l + 6 * W))),
                xf_add(xf_add(xf_load(l + W), xf_load(l + 5 * W)), xf_add(xf_load(l + 3 * W), xf_load(l + 7 * W))));
}

/* rows [n0, n1) of an x8 matrix (multiples of 8) for M <= SD_MB activation rows, TYPE a
   constant: mm_x8_k for the K-quants, mm_x8_b for the 32-element blocks */
SD_INLINE int mm_x8_k(const int TYPE, const sd_mat* w, const sd_act* a, int64_t M, int64_t n0, int64_t n1, float* y,
                      int64_t ldy) {
  if (M <= 4) { /* a few rows: codes straight from the blocks */
    for (int64_t g = n0 / 8; g < n1 / 8; g++) {
      switch (M) {
        case 1: kx8_direct_group(TYPE, 1, w, a, g, y, ldy); break;
        case 2: kx8_direct_group(TYPE, 2, w, a, g, y, ldy); break;
        case 3: kx8_direct_group(TYPE, 3, w, a, g, y, ldy); break;
        default: kx8_direct_group(TYPE, 4, w, a, g, y, ldy); break;
      }
    }
    return 0;
  }
  SD_ALIGN(64) float acc[SD_MB * 64 * XG];
#if SD_AMX
  if (sd_amx_ok && M >= AMX_MIN_ROWS(TYPE)) {
    /* the tile shapes are the thread's state: loaded for every call (another library on this
       thread may have loaded its own) and released after it (so that the OS need not save
       the tiles' 8 KB at every switch) */
    amx_configure(M < 16 ? (int)M : 16);
    for (int64_t g = n0 / 8; g < n1 / 8; g += 2) {
      const int ng = n1 / 8 - g < 2 ? (int)(n1 / 8 - g) : 2;
      amx_unit(TYPE, w, a, M, g, ng, acc);
      for (int64_t m = 0; m < M; m++) memcpy(y + m * ldy + 8 * g, acc + m * 16, sizeof(float) * 8 * (size_t)ng);
    }
    _tile_release();
    return 0;
  }
#endif
  int64_t g = n0 / 8;
#if X_PAIR
  for (; g + 2 * XG <= n1 / 8; g += 2 * XG) { /* two whole units at a time, then what is left */
    kx8_unit_pair(TYPE, w, a, M, g, acc, acc + SD_MB * 8 * XG);
    for (int h = 0; h < 2; h++)
      for (int64_t m = 0; m < M; m++) memcpy(y + m * ldy + 8 * (g + h * XG), acc + h * SD_MB * 8 * XG + m * 8 * XG, sizeof(float) * 8 * XG);
  }
#endif
  for (; g < n1 / 8; g += XG) {
    const int ng = n1 / 8 - g < XG ? (int)(n1 / 8 - g) : XG;
    kx8_unit(TYPE, w, a, M, g, ng, acc);
    for (int64_t m = 0; m < M; m++) {
      SD_ALIGN(64) float out[8 * XG];
      xf_store(out, xf_load(acc + m * 8 * XG));
      memcpy(y + m * ldy + 8 * g, out, sizeof(float) * 8 * (size_t)ng);
    }
  }
  return 0;
}

SD_INLINE int mm_x8_b(const int TYPE, const sd_mat* w, const sd_act* a, int64_t M, int64_t n0, int64_t n1, float* y,
                      int64_t ldy) {
  if (TYPE == SD_Q4_0 && M == 1) {
    for (int64_t g = n0 / 8; g < n1 / 8; g++) bx8_one_row_q4_0(w, a, g, y);
    return 0;
  }
#if XG == 2
  if (TYPE == SD_Q4_0 && M == 2) {
    for (int64_t g = n0 / 8; g < n1 / 8; g++) bx8_two_rows_q4_0(w, a, g, y, ldy);
    return 0;
  }
#endif
  SD_ALIGN(64) float acc[SD_MB * 64 * XG];
  for (int64_t g = n0 / 8; g < n1 / 8; g += XG) {
    const int ng = n1 / 8 - g < XG ? (int)(n1 / 8 - g) : XG;
    bx8_unit(TYPE, w, a, M, g, ng, acc);
    for (int64_t m = 0; m < M; m++) {
      SD_ALIGN(64) float out[8 * XG];
      xf_store(out, xf_tree8(acc + m * 64 * XG));
      memcpy(y + m * ldy + 8 * g, out, sizeof(float) * 8 * (size_t)ng);
    }
  }
  return 0;
}
