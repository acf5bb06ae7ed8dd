/* The K-quants' many-row matmul on AMX tiles (the "amx" build: avx512vnni plus AMX-INT8, Intel
   Xeon of Sapphire Rapids and later). Included by x8_x86.h; mm_x8_k takes it for passes of
   AMX_MIN_ROWS rows and more (Q4_K 5, Q6_K 9) where the OS lets this process use the tiles;
   fewer rows, and a CPU or OS without them, take the VNNI paths.

   Why: a pass of many rows -- a prefill chunk, a long verification -- is compute-bound on each
   block. The VNNI unit decodes a super-block of 16 weight rows into L1 and every activation
   row then takes 64 vpdpbusd of it; one tile product (tdpbsud) takes 16 activation rows x 16
   weight rows x 64 elements, so an extra row costs its share of the decode and of the float
   steps instead of its products. A 64-row target pass 367 -> 229 ms, 16 rows 107 -> 86 ms
   (speed notes, item 90).

   The numbers are dot_portable.h's, bit for bit. A tile product sums over its 64 elements, but
   a K-quant's integer S1 = sum over its scale units j of sc_j * t_j needs every unit's t_j
   scaled first. So each weight's scale goes into the weights' bytes before the product:
     Q4_K  sc = 16 hi + lo (lo <= 15, hi <= 3): code * lo and code * hi are bytes (<= 225), and
           S1 = C_lo + 16 C_hi, C_lo = sum over the super-block of x * (code * lo_j), C_hi alike
           (|C| < 2^23). S2 (the mins against the activation's 32-code sums) as kx8's.
     Q6_K  the reference's S1 - 32 S2 = sum over units g of sc_g * sum (code - 32) x, so each
           weight's w = sc * (code - 32) (|w| <= 128 * 32 = 4096) is split into its low byte
           (unsigned) and high byte (signed, |hi| <= 16): S1 - 32 S2 = C_lo + 256 C_hi, with no
           S2 to take.
   Integer sums are exact in any order, so these are the VNNI unit's integers, and the float
   steps are kx8_finish's, lane by lane.

   Layout: chunk c of a folded super-block is 64 bytes, elements 4c..4c+3 of 16 weight rows (4
   bytes a row, the two groups' 8 rows side by side, as kx8's codes): exactly the B layout of a
   tile product (K/4 rows of 16 x 4 bytes), so a 64-element step's B is 16 consecutive chunks.
   A is 16 activation rows' codes of that step, read in place (row stride K). Each super-block
   is decoded, multiplied and finished in turn: a version that ran the three stages on three
   super-blocks at once (products of b beside the decode of b+1 and the float steps of b-1,
   buffers doubled) measured no faster (item 90). */

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

typedef struct {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_cfg;

#if defined(SD_AMX_EMULATED)
/* The tests' build of this path for CPUs without AMX (with SIMDe's AVX-512, as the emulated
   VNNI builds): the six tile instructions it uses, in C, on a register file of the calling
   thread, as Intel's manual defines them -- so that the tile path is held to the portable
   build bit for bit on any x86 machine, not only where the tiles exist. */
typedef struct {
  uint8_t rows[8];
  uint16_t colsb[8];
  SD_ALIGN(64) uint8_t t[8][16][64];
} sd_tile_file;
static __thread sd_tile_file sd_tmm;

static void sd_tile_loadconfig(const void* cfg) {
  const amx_cfg* c = (const amx_cfg*)cfg;
  memset(&sd_tmm, 0, sizeof sd_tmm);
  for (int i = 0; i < 8; i++) {
    sd_tmm.rows[i] = c->rows[i];
    sd_tmm.colsb[i] = c->colsb[i];
  }
}
static void sd_tile_loadd(int i, const void* p, int64_t stride) {
  memset(sd_tmm.t[i], 0, sizeof sd_tmm.t[i]);
  for (int r = 0; r < sd_tmm.rows[i]; r++) memcpy(sd_tmm.t[i][r], (const uint8_t*)p + r * stride, sd_tmm.colsb[i]);
}
static void sd_tile_stored(int i, void* p, int64_t stride) {
  for (int r = 0; r < sd_tmm.rows[i]; r++) memcpy((uint8_t*)p + r * stride, sd_tmm.t[i][r], sd_tmm.colsb[i]);
}
/* C[m].dword[n] += sum over k < colsb(A) / 4, i < 4 of signed A[m].byte[4k + i] * B[k].byte[4n + i],
   B's bytes unsigned (tdpbsud) or signed (tdpbssd) */
static void sd_tile_dp(int c, int a, int b, int b_signed) {
  for (int m = 0; m < sd_tmm.rows[c]; m++)
    for (int n = 0; n < sd_tmm.colsb[c] / 4; n++) {
      int32_t acc;
      memcpy(&acc, sd_tmm.t[c][m] + 4 * n, 4);
      for (int k = 0; k < sd_tmm.colsb[a] / 4; k++)
        for (int i = 0; i < 4; i++) {
          const uint8_t wb = sd_tmm.t[b][k][4 * n + i];
          acc += (int32_t)(int8_t)sd_tmm.t[a][m][4 * k + i] * (b_signed ? (int32_t)(int8_t)wb : (int32_t)wb);
        }
      memcpy(sd_tmm.t[c][m] + 4 * n, &acc, 4);
    }
}
#undef _tile_loadconfig
#undef _tile_zero
#undef _tile_loadd
#undef _tile_stored
#undef _tile_dpbsud
#undef _tile_dpbssd
#undef _tile_release
#define _tile_loadconfig(c) sd_tile_loadconfig(c)
#define _tile_zero(i) memset(sd_tmm.t[i], 0, sizeof sd_tmm.t[i])
#define _tile_loadd(i, p, s) sd_tile_loadd(i, p, s)
#define _tile_stored(i, p, s) sd_tile_stored(i, p, s)
#define _tile_dpbsud(c, a, b) sd_tile_dp(c, a, b, 0)
#define _tile_dpbssd(c, a, b) sd_tile_dp(c, a, b, 1)
#define _tile_release() memset(&sd_tmm, 0, sizeof sd_tmm)
#endif

/* a folded super-block of 16 weight rows, and what its float steps need */
typedef struct {
  /* chunk c of the weights' bytes: Q4_K code * lo and code * hi of each row's scale, Q6_K the low
     and high byte of scale * (code - 32) */
  SD_ALIGN(64) uint8_t lo[64][64], hi[64][64];
} amx_fold;
typedef struct {
  SD_ALIGN(64) int16_t wsum[4][32]; /* kx8's wsum: min pairs (mn_2p, mn_2p+1) of each row */
  SD_ALIGN(64) float d[16], dmin[16];
} amx_meta;

/* the tile shapes: 0, 1 B lo / hi (16 x 64 bytes); 2 A (rows x 64); 3, 4 C lo / hi (rows x 16
   int32), `rows` = the activation rows a tile product takes (16, or all of M when fewer) */
SD_INLINE void amx_configure(int rows) {
  SD_ALIGN(64) amx_cfg c;
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int i = 0; i < 5; i++) {
    c.rows[i] = (uint8_t)(i < 2 ? 16 : rows);
    c.colsb[i] = 64;
  }
  _tile_loadconfig(&c);
}

/* group gi's (8 rows') scales, mins and d of an x8 Q4_K super-block: sc[j][r] bytes into scb +
   8 * gi (rows of 16 bytes), the mins' S2 pairs, d and dmin into o */
SD_INLINE void amx_scales_q4_K(const x8_q4_K* x, int gi, uint8_t scb[8][16], amx_meta* o) {
  SD_ALIGN(32) uint8_t sc[64], mn[64]; /* [j][row] */
  kx8_q4_K_scales(x, sc, mn);
#pragma GCC unroll 8
  for (int j = 0; j < 8; j++) memcpy(scb[j] + 8 * gi, sc + 8 * j, 8);
#pragma GCC unroll 4
  for (int p = 0; p < 4; p++) {
    const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(mn + 16 * p)));
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(mn + 16 * p + 8)));
    _mm256_store_si256((__m256i*)(o->wsum[p] + 16 * gi), _mm256_or_si256(a, _mm256_slli_epi32(b, 16)));
  }
  _mm256_store_ps(o->d + 8 * gi, h8(x->d));
  _mm256_store_ps(o->dmin + 8 * gi, h8(x->dmin));
}

/* two groups' x8 Q4_K super-blocks (rows 0-7, 8-15) -> one folded super-block */
SD_INLINE void amx_decode_q4_K(const x8_q4_K* x0, const x8_q4_K* x1, amx_fold* o, amx_meta* meta) {
  SD_ALIGN(64) uint8_t scb[8][16];
  amx_scales_q4_K(x0, 0, scb, meta);
  amx_scales_q4_K(x1, 1, scb, meta);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
#pragma GCC unroll 1
  for (int c = 0; c < 4; c++) {
    /* sub-blocks 2c (low nibbles) and 2c+1 (high): each row's lo and hi multiplier in both
       16-bit halves of its lane, so that a 16-bit multiply keeps each byte's product in its byte
       (code <= 15, multiplier <= 15: <= 225, and the high byte's product stays below 2^16) */
    __m512i L[2], H[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
      const __m512i v = xv_pair(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)scb[2 * c + h])),
                                _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(scb[2 * c + h] + 8))));
      const __m512i l = _mm512_and_si512(v, _mm512_set1_epi32(15)), hh = _mm512_srli_epi32(v, 4);
      L[h] = _mm512_or_si512(l, _mm512_slli_epi32(l, 16));
      H[h] = _mm512_or_si512(hh, _mm512_slli_epi32(hh, 16));
    }
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
      const __m512i raw = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(x0->qs + (c * 8 + k) * 32))),
                                             _mm256_loadu_si256((const __m256i*)(x1->qs + (c * 8 + k) * 32)), 1);
      const __m512i qa = _mm512_and_si512(raw, m4), qb = _mm512_and_si512(_mm512_srli_epi16(raw, 4), m4);
      _mm512_store_si512((void*)o->lo[16 * c + k], _mm512_mullo_epi16(qa, L[0]));
      _mm512_store_si512((void*)o->hi[16 * c + k], _mm512_mullo_epi16(qa, H[0]));
      _mm512_store_si512((void*)o->lo[16 * c + 8 + k], _mm512_mullo_epi16(qb, L[1]));
      _mm512_store_si512((void*)o->hi[16 * c + 8 + k], _mm512_mullo_epi16(qb, H[1]));
    }
  }
}

/* two groups' x8 Q6_K super-blocks -> one folded super-block. Q6_K's integer is
   S1 - 32 S2 = sum over the scale units g of sc_g * sum (q - 32) x: each weight's own
   w = sc * (q - 32) (|w| <= 128 * 32 = 4096) is split into bytes, lo = w & 255 (unsigned) and
   hi = w >> 8 (signed, |hi| <= 16), and sum x w = C_lo + 256 C_hi: the S1 - 32 S2 of
   kx8_finish, with no S2 to take. The codes are kx8_decode's, both groups in one register. */
SD_INLINE void amx_fold_q6_K(__m512i v, __m512i m, uint8_t* lo, uint8_t* hi) {
  /* v: the signed codes q - 32, 4 a row; m: each row's scale in both 16-bit halves of its lane.
     Each 16-bit half holds two codes: the even one sign-extended in place, the odd one shifted
     down, each times the scale (|w| <= 4096: a 16-bit product), then the products' low bytes
     put back in the codes' order for lo and their high bytes for hi -- no lane crossing */
  const __m512i e = _mm512_mullo_epi16(_mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8), m);
  const __m512i o = _mm512_mullo_epi16(_mm512_srai_epi16(v, 8), m);
  const __m512i ff = _mm512_set1_epi16(0x00FF);
  /* ternary logic 0xCA: ff ? A : B, bit by bit -- A's low bytes, B's high bytes */
  _mm512_store_si512((void*)lo, _mm512_ternarylogic_epi32(ff, e, _mm512_slli_epi16(o, 8), 0xCA));
  _mm512_store_si512((void*)hi, _mm512_ternarylogic_epi32(ff, _mm512_srli_epi16(e, 8), o, 0xCA));
}

SD_INLINE void amx_decode_q6_K(const x8_q6_K* x0, const x8_q6_K* x1, amx_fold* o, amx_meta* meta) {
  _mm256_store_ps(meta->d, h8(x0->d));
  _mm256_store_ps(meta->d + 8, h8(x1->d));
  /* unit u's scales as 16-bit multipliers, each row's in both halves of its 32-bit lane */
  __m512i ms[16];
#pragma GCC unroll 16
  for (int u = 0; u < 16; u++) {
    const __m512i w = xv_pair(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(x0->scales + 8 * u))),
                              _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(x1->scales + 8 * u))));
    ms[u] = _mm512_or_si512(_mm512_and_si512(w, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(w, 16));
  }
  const __m512i b32 = _mm512_set1_epi8(32);
#pragma GCC unroll 1
  for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
    for (int k = 0; k < 8; k++) {
      __m256i c0[4], c1[4];
      kx8_q6_K_codes(x0, h, k, c0);
      kx8_q6_K_codes(x1, h, k, c1);
#pragma GCC unroll 4
      for (int p = 0; p < 4; p++) {
        const int c = 32 * h + 8 * p + k, u = c / 4;
        const __m512i v = _mm512_sub_epi8(_mm512_inserti64x4(_mm512_castsi256_si512(c0[p]), c1[p], 1), b32);
        amx_fold_q6_K(v, ms[u], o->lo[c], o->hi[c]);
      }
    }
}

/* the tile products of one folded super-block against the rows of a block (x: row 0's codes of
   this super-block, rows ldx apart) into tiles 3 (C lo) and 4 (C hi); amx_store writes them */
SD_INLINE void amx_products(const int TYPE, const amx_fold* f, const int8_t* x, int64_t ldx) {
  _tile_zero(3);
  _tile_zero(4);
#pragma GCC unroll 4
  for (int t = 0; t < 4; t++) {
    _tile_loadd(0, f->lo[16 * t], 64);
    _tile_loadd(1, f->hi[16 * t], 64);
    _tile_loadd(2, x + 64 * t, ldx);
    _tile_dpbsud(3, 2, 0);
    if (TYPE == SD_Q4_K)
      _tile_dpbsud(4, 2, 1); /* code * hi: unsigned */
    else
      _tile_dpbssd(4, 2, 1); /* Q6_K's high bytes: signed */
  }
}

SD_INLINE void amx_store(int32_t c[2][16][16]) {
  _tile_stored(3, c[0], 64);
  _tile_stored(4, c[1], 64);
}

/* rows [r0, R) of a block's products: the integers (Q4_K: S1 = C_lo + 16 C_hi and S2; Q6_K:
   S1 - 32 S2 = C_lo + 256 C_hi) and the float steps of kx8_finish into acc (row r at acc + r *
   16; dx: row r's scale at dx[r * nb]) */
SD_INLINE void amx_finish(const int TYPE, const amx_meta* f, int32_t c[2][16][16], int r0, int R, const int16_t* bs,
                          int64_t ldb, const float* dx, int64_t nb, float* acc) {
  const __m512 d = _mm512_load_ps(f->d);
  if (TYPE == SD_Q6_K) {
    for (int r = r0; r < R; r++) {
      const __m512i S = _mm512_add_epi32(_mm512_load_si512((const void*)c[0][r]),
                                         _mm512_slli_epi32(_mm512_load_si512((const void*)c[1][r]), 8));
      const __m512 a = _mm512_load_ps(acc + r * 16);
      _mm512_store_ps(acc + r * 16, _mm512_add_ps(a, _mm512_mul_ps(_mm512_mul_ps(d, _mm512_set1_ps(dx[r * nb])), xf_cvt(S))));
    }
    return;
  }
  const __m512 dmin = _mm512_load_ps(f->dmin);
  const __m512i w0 = _mm512_load_si512((const void*)f->wsum[0]), w1 = _mm512_load_si512((const void*)f->wsum[1]);
  const __m512i w2 = _mm512_load_si512((const void*)f->wsum[2]), w3 = _mm512_load_si512((const void*)f->wsum[3]);
  for (int r = r0; r < R; r++) {
    const __m512i S1 = _mm512_add_epi32(_mm512_load_si512((const void*)c[0][r]),
                                        _mm512_slli_epi32(_mm512_load_si512((const void*)c[1][r]), 4));
    const int16_t* b = bs + r * ldb;
    int32_t v[4];
    memcpy(v, b, 16);
    __m512i S2 = _mm512_dpwssd_epi32(_mm512_setzero_si512(), w0, _mm512_set1_epi32(v[0]));
    S2 = _mm512_dpwssd_epi32(S2, w1, _mm512_set1_epi32(v[1]));
    S2 = _mm512_dpwssd_epi32(S2, w2, _mm512_set1_epi32(v[2]));
    S2 = _mm512_dpwssd_epi32(S2, w3, _mm512_set1_epi32(v[3]));
    const __m512 dxv = _mm512_set1_ps(dx[r * nb]);
    __m512 a = _mm512_load_ps(acc + r * 16);
    a = _mm512_add_ps(a, _mm512_mul_ps(_mm512_mul_ps(d, dxv), xf_cvt(S1)));
    a = _mm512_sub_ps(a, _mm512_mul_ps(_mm512_mul_ps(dmin, dxv), xf_cvt(S2)));
    _mm512_store_ps(acc + r * 16, a);
  }
}

/* acc [M][16] (M <= SD_MB) for the unit of 2 groups at group g (ng of them real), TYPE Q4_K or Q6_K */
SD_INLINE void amx_unit(const int TYPE, const sd_mat* w, const sd_act* a, int64_t M, int64_t g, int ng, float* acc) {
  const int64_t K = w->cols, nb = K / QKK;
  const size_t xb = TYPE == SD_Q4_K ? sizeof(x8_q4_K) : sizeof(x8_q6_K);
  const uint8_t* g0 = (const uint8_t*)w->data + g * nb * xb;
  const uint8_t* g1 = (const uint8_t*)w->data + (g + (ng > 1 ? 1 : 0)) * nb * xb; /* a missing second group: the first again */
  SD_ALIGN(64) amx_fold f;
  SD_ALIGN(64) amx_meta mt;
  SD_ALIGN(64) int32_t c[2][16][16];
  /* blocks of R = min(M, 16) rows; where M is not a multiple of 16 the last block ends at row M,
     overlapping the one before, and finishes only its new rows (a row's products do not depend
     on the block it is in) */
  const int R = M < 16 ? (int)M : 16;
  for (int64_t i = 0; i < M * 16; i++) acc[i] = 0.0f;
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t *b0 = g0 + b * xb, *b1 = g1 + b * xb;
    sd_prefetch(b0 + xb, xb);
    sd_prefetch(b1 + xb, xb);
    if (TYPE == SD_Q4_K)
      amx_decode_q4_K((const x8_q4_K*)b0, (const x8_q4_K*)b1, &f, &mt);
    else
      amx_decode_q6_K((const x8_q6_K*)b0, (const x8_q6_K*)b1, &f, &mt);
    for (int64_t done = 0; done < M;) {
      const int64_t m0 = done + R <= M ? done : M - R;
      amx_products(TYPE, &f, a->qs + m0 * K + b * QKK, K);
      amx_store(c);
      amx_finish(TYPE, &mt, c, (int)(done - m0), R, a->sums32 + m0 * (K / 32) + b * 8, K / 32, a->d + m0 * nb + b, nb,
                 acc + m0 * 16);
      done = m0 + R;
    }
  }
}

/* the smallest pass the tiles take, per type: below it the VNNI paths are as fast or faster
   (one process, interleaved, 2 threads, a 8960 x 1536 matrix: Q4_K 5 rows par, 8 rows 0.82
   of VNNI's time; Q6_K 8 rows 1.08, 9 rows 0.84, 16 rows 0.71; speed notes, item 90) */
#define AMX_MIN_ROWS(TYPE) ((TYPE) == SD_Q4_K ? 5 : 9)

/* 1 where this process may use the tiles: the CPU has them, the OS saves them (XCR0 bits 17-18)
   and, on Linux, granted this process their state (arch_prctl ARCH_REQ_XCOMP_PERM: without it
   the first tile instruction faults); asked once, when the library loads, before any thread of
   ours runs */
static int sd_amx_ok;

__attribute__((constructor)) static void sd_amx_init(void) {
#if defined(SD_AMX_EMULATED)
  sd_amx_ok = 1;
#else
  /* the CPU and the OS: features.c's one test (cpuid AMX-TILE and AMX-INT8, XCR0's tile bits) */
  if (!(sd_cpu_features() & SD_CPU_AMXINT8)) return;
#if defined(__linux__)
  if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0) return;
#endif
  sd_amx_ok = 1;
#endif
}
