/* Attention over the positional KV cache: every query row against the keys and values of the
   positions up to its own, in the float order forward.c states:

     s_j = tree8(q . k_j) * scale        (j < L, L = the row's position + 1)
     p_j = e^(s_j - max_j s_j)           (sd_exp_inplace's polynomial)
     out = (sum_j p_j v_j) / tree8(p)    (the v-sum per element, over j in order, from +0.0)

   Two ways to the same numbers. The reference (`attention_rows`, every build but x86) takes one
   (row, head) at a time: a function call per key, then one walk over the values per 8 elements
   of a head. On x86 (`attention_tiles`) the heads that share a key-value head go together, up to
   8 of them, so each key and each value is read once for all of them instead of once a head and
   8 times a value row: scores are kept [key][head] with one head a lane, and every lane does
   exactly what the reference does for its head -- the dot product's 8 partial sums in the same
   order, the same tree, the same max, exponent, sums and divisions. That is what keeps the
   builds equal bit for bit (the kernel tests compare them) while a 4,096-token prefill's
   attention went from 53 s to 9 s on a 2-core Zen 5 VM (speed notes, item 63). Once a
   key-value head's cache passes 512 KB (a quarter of a 2 MB L2), up to 8 rows of a pass go
   together over blocks of 64 keys, so a block read from L3 serves them all (item 95). Rows share loads, never arithmetic,
   so a row's result does not depend on how many rows share the pass or how they are grouped. */
#include "sdcpu.h"

#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX2__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

/* ---------------------------------------------------------------- the reference, a head at a time */

/* out[hd] = sum over j < L of p[j] * v_j, in order of j, per element */
static void weighted_sum(const float* p, const float* vbase, int64_t stride, int64_t L, int hd, float* out) {
  int d = 0;
#if defined(__AVX2__)
  for (; d + 8 <= hd; d += 8) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t j = 0; j < L; j++)
      acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(vbase + j * stride + d)));
    _mm256_storeu_ps(out + d, acc);
  }
#elif defined(__ARM_NEON)
  for (; d + 4 <= hd; d += 4) {
    float32x4_t acc = vdupq_n_f32(0.0f);
    for (int64_t j = 0; j < L; j++) acc = vaddq_f32(acc, vmulq_f32(vdupq_n_f32(p[j]), vld1q_f32(vbase + j * stride + d)));
    vst1q_f32(out + d, acc);
  }
#endif
  for (; d < hd; d++) {
    float acc = 0.0f;
    for (int64_t j = 0; j < L; j++) acc = acc + p[j] * vbase[j * stride + d];
    out[d] = acc;
  }
}

static float tree8_sum(const float* p, int64_t n) {
  /* tree8 of p: the dot with ones multiplies by 1.0 exactly */
  float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const int64_t n8 = n & ~(int64_t)7;
  for (int64_t i = 0; i < n8; i += 8)
    for (int j = 0; j < 8; j++) l[j] = l[j] + p[i + j];
  float r = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
  for (int64_t i = n8; i < n; i++) r = r + p[i];
  return r;
}

/* one (row t, head h): scratch s holds L scores */
static void attend_one(const sd_model* m, const float* q, const float* kc, const float* vc, int64_t t, int h,
                       int64_t start, float* s, float* att) {
  const int hd = m->head_dim, kvh = h / (m->n_heads / m->n_kv_heads);
  const int64_t hkv = (int64_t)m->n_kv_heads * hd, L = start + t + 1;
  const float* qv = q + (t * m->n_heads + h) * hd;
  float mx = -INFINITY;
  for (int64_t j = 0; j < L; j++) {
    s[j] = sd_tree8_dot(qv, kc + j * hkv + kvh * hd, hd) * m->attn_scale;
    mx = s[j] > mx ? s[j] : mx;
  }
  for (int64_t j = 0; j < L; j++) s[j] = s[j] - mx;
  sd_exp_inplace(s, L);
  const float sum = tree8_sum(s, L);
  float* out = att + (t * m->n_heads + h) * hd;
  weighted_sum(s, vc + kvh * hd, hkv, L, hd, out);
  for (int d = 0; d < hd; d++) out[d] = out[d] / sum;
}

static void attention_rows(const sd_model* m, const float* q, const float* kc, const float* vc, int64_t T,
                           int64_t start, float* att, float* scratch, int64_t L_max, int nt) {
  const int H = m->n_heads;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t th = 0; th < T * H; th++) {
#ifdef _OPENMP
    float* s = scratch + (int64_t)omp_get_thread_num() * SD_ATT_SCRATCH(L_max);
#else
    float* s = scratch;
#endif
    attend_one(m, q, kc, vc, th / H, (int)(th % H), start, s, att);
  }
}

/* ---------------------------------------------------------------- x86: the heads of a group together */
#if defined(__AVX2__)

/* Keys this far ahead are prefetched in both loops over keys: a row's keys and values stream
   from L3 or memory, and a key's ~150 instructions of products leave the core's out-of-order
   window too short to have the next keys' lines in flight by itself -- one row at 2,048 tokens
   spent 12 ms a pass here where a plain read of its 117 MB takes 3-5 (speed notes, item 104).
   A hint: it moves no number. */
#define SD_ATT_PREFETCH 16

/* lane i of the result: the tree8 of a[i]'s 8 lanes, ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)),
   for 8 vectors at once (lanes 0-3 from a[0..3], 4-7 from a[4..7]) */
SD_INLINE __m256 tree8_x8(const __m256 a[8]) {
  __m256 s[4]; /* s[i]: (l0+l4, l1+l5, l2+l6, l3+l7) of a[i] | the same of a[i+4] */
  for (int i = 0; i < 4; i++)
    s[i] = _mm256_add_ps(_mm256_permute2f128_ps(a[i], a[i + 4], 0x20), _mm256_permute2f128_ps(a[i], a[i + 4], 0x31));
  /* w01: (A0, A1, B0, B1 | A4, A5, B4, B5), A = (l0+l4) + (l2+l6), B = (l1+l5) + (l3+l7) */
  const __m256 w01 = _mm256_add_ps(_mm256_unpacklo_ps(s[0], s[1]), _mm256_unpackhi_ps(s[0], s[1]));
  const __m256 w23 = _mm256_add_ps(_mm256_unpacklo_ps(s[2], s[3]), _mm256_unpackhi_ps(s[2], s[3]));
  return _mm256_add_ps(_mm256_shuffle_ps(w01, w23, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm256_shuffle_ps(w01, w23, _MM_SHUFFLE(3, 2, 3, 2)));
}

#if defined(__AVX512F__)
/* The same tile on 512-bit registers: two keys (j, j+1) a register in the scores, one half
   each, and 16 elements of every head a register in the values -- half the instructions, each
   lane's operations and their order those of the 256-bit tile (and of the reference). */

SD_INLINE __m512 pair256(__m256 lo, __m256 hi) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
}

/* per 128-bit quarter q of the result: tree8_x8 of the 8 vectors' halves, as
   (heads 0-3 at j, heads 0-3 at j+1, heads 4-7 at j, heads 4-7 at j+1) before the last shuffle,
   then (heads 0-7 at j | heads 0-7 at j+1) */
SD_INLINE __m512 tree8_x8_pairs(const __m512 a[8]) {
  __m512 s[4];
  for (int i = 0; i < 4; i++)
    s[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a[i], a[i + 4], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 w01 = _mm512_add_ps(_mm512_unpacklo_ps(s[0], s[1]), _mm512_unpackhi_ps(s[0], s[1]));
  const __m512 w23 = _mm512_add_ps(_mm512_unpacklo_ps(s[2], s[3]), _mm512_unpackhi_ps(s[2], s[3]));
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(w01, w23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm512_shuffle_ps(w01, w23, _MM_SHUFFLE(3, 2, 3, 2)));
  return _mm512_shuffle_f32x4(r, r, _MM_SHUFFLE(3, 1, 2, 0));
}
#endif

/* The scores of keys [j, j1) for one row: s[8 * j'] the tile's lanes for key j', the running
   maxima updated in order of j (mx2: two keys a register, the 512-bit loops; mx: the rest). Every
   score is the same whichever loop takes its key (each lane: its products summed over the
   blocks in order, then the tree); a caller splits a row's keys so that only its last range has
   fewer than four, which keeps the loops -- and so the maxima's order -- those of one sweep. */
SD_INLINE void scores_range(const int NQ, const int64_t hkv, const int nb, const float* kbase, const float* qq,
                            int paired, const float* const* qv, float scale_f, int64_t j, int64_t j1, float* s,
                            void* mx2_, __m256* mx) {
#if defined(__AVX512F__)
  __m512* mx2 = (__m512*)mx2_;
  const __m512 scale2 = _mm512_set1_ps(scale_f);
  /* four keys an iteration: each head's block of q is loaded once for two pairs of keys (the
     loads, not the products, were what the pair loop waited on); a lane's sums are the pair
     loop's, in its order */
  for (; paired && j + 4 <= j1; j += 4) {
    const float* k0 = kbase + j * hkv;
    for (int p = 0; p < 4; p++) sd_prefetch(k0 + (SD_ATT_PREFETCH + p) * hkv, nb * 32);
    __m512 acc0[8], acc1[8];
    for (int i = 0; i < 8; i++) acc0[i] = acc1[i] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
      const __m512 kb0 = pair256(_mm256_loadu_ps(k0 + 8 * b), _mm256_loadu_ps(k0 + hkv + 8 * b));
      const __m512 kb1 = pair256(_mm256_loadu_ps(k0 + 2 * hkv + 8 * b), _mm256_loadu_ps(k0 + 3 * hkv + 8 * b));
      for (int i = 0; i < NQ; i++) {
        const __m512 qb = _mm512_load_ps(qq + (i * nb + b) * 16);
        acc0[i] = _mm512_add_ps(acc0[i], _mm512_mul_ps(qb, kb0));
        acc1[i] = _mm512_add_ps(acc1[i], _mm512_mul_ps(qb, kb1));
      }
    }
    const __m512 sj0 = _mm512_mul_ps(tree8_x8_pairs(acc0), scale2), sj1 = _mm512_mul_ps(tree8_x8_pairs(acc1), scale2);
    _mm512_storeu_ps(s + 8 * j, sj0);
    _mm512_storeu_ps(s + 8 * (j + 2), sj1);
    *mx2 = _mm512_max_ps(sj1, _mm512_max_ps(sj0, *mx2));
  }
  for (; paired && j + 2 <= j1; j += 2) {
    const float* k0 = kbase + j * hkv;
    __m512 acc[8];
    for (int i = 0; i < 8; i++) acc[i] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
      const __m512 kb = pair256(_mm256_loadu_ps(k0 + 8 * b), _mm256_loadu_ps(k0 + hkv + 8 * b));
      for (int i = 0; i < NQ; i++) acc[i] = _mm512_add_ps(acc[i], _mm512_mul_ps(_mm512_load_ps(qq + (i * nb + b) * 16), kb));
    }
    const __m512 sj = _mm512_mul_ps(tree8_x8_pairs(acc), scale2);
    _mm512_storeu_ps(s + 8 * j, sj);
    *mx2 = _mm512_max_ps(sj, *mx2);
  }
#else
  (void)qq, (void)paired, (void)mx2_;
#endif
  const __m256 scale = _mm256_set1_ps(scale_f);
  for (; j < j1; j++) {
    const float* kj = kbase + j * hkv;
    sd_prefetch(kj + SD_ATT_PREFETCH * hkv, nb * 32);
    __m256 acc[8];
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
      const __m256 kb = _mm256_loadu_ps(kj + 8 * b);
      for (int i = 0; i < NQ; i++) acc[i] = _mm256_add_ps(acc[i], _mm256_mul_ps(_mm256_loadu_ps(qv[i] + 8 * b), kb));
    }
    const __m256 sj = _mm256_mul_ps(tree8_x8(acc), scale);
    _mm256_storeu_ps(s + 8 * j, sj);
    /* max_ps(sj, mx) keeps mx where both are zeros or sj is NaN: the reference's first of equal
       maxima, NaNs passed over (and a zero's sign would not change s - max and its e^ anyway) */
    *mx = _mm256_max_ps(sj, *mx);
  }
}

/* The rows t0 .. t0+nr-1 (nr <= SD_ATT_ROWS) of the nq <= 8 heads that share the key-value head
   kvh, from head h0; s: a thread's SD_ATT_SCRATCH(L_max) floats, row r's scores [L][8] at
   r * SD_ATT_STRIDE(L_max), then the rows' q blocks and their parked sums.
   NQ (a constant once inlined, nq <= NQ <= 8): the lanes that are computed. Lanes past NQ take
   no products -- their scores are zeros, their values never summed -- so a group of 6 heads
   (Qwen2.5-1.5B's 12 over 2) does 6/8 of the arithmetic an 8-lane tile would; a lane's own
   operations do not depend on the others', so the stored heads' numbers are the same.

   Why rows together: one row's keys and values of a 2,000-token context (2 MB a key-value head)
   do not stay in a core's L2 from one row to the next, so a prefill read them from L3 once a
   row (the loads were where the time went: 24% of a 2,048-token prefill, item 95). Here a block
   of KB keys (and then of values) is read once from L3 and used by all the rows while it is in
   L1. Nothing a lane computes moves: each row's scores are still taken in order of j, its sums
   over j still run in order, parked in memory between blocks (a float stored and loaded is the
   same float). */
#define KB 64
SD_INLINE void attend_group_n(const int NQ, const sd_model* m, const float* q, const float* kc, const float* vc,
                              int64_t t0, int nr, int h0, int nq, int64_t start, float* s, int64_t L_max,
                              float* att) {
  const int hd = m->head_dim, H = m->n_heads, kvh = h0 / (H / m->n_kv_heads), nb = hd / 8;
  const int64_t hkv = (int64_t)m->n_kv_heads * hd, Lend = start + t0 + nr; /* the last row's L */
  const float* kbase = kc + (int64_t)kvh * hd;
  const int64_t sstride = SD_ATT_STRIDE(L_max); /* floats from one row's scores to the next */
  const float* qv[SD_ATT_ROWS][8];
  for (int r = 0; r < nr; r++)
    for (int i = 0; i < 8; i++) qv[r][i] = q + ((t0 + r) * H + h0 + (i < nq ? i : 0)) * hd; /* spare lanes repeat head h0 */
  __m256 mx[SD_ATT_ROWS];
  for (int r = 0; r < nr; r++) mx[r] = _mm256_set1_ps(-INFINITY);
#if defined(__AVX512F__)
  float* qq[SD_ATT_ROWS]; /* each row's heads' 8-element blocks, twice (both halves) */
  for (int r = 0; r < nr; r++) qq[r] = s + SD_ATT_ROWS * sstride + (int64_t)r * 16 * SD_ATT_MAX_HD;
  const int paired = hd <= SD_ATT_MAX_HD;
  __m512 mx2[SD_ATT_ROWS];
  for (int r = 0; r < nr; r++) {
    mx2[r] = _mm512_set1_ps(-INFINITY);
    if (paired)
      for (int i = 0; i < NQ; i++)
        for (int b = 0; b < nb; b++) {
          memcpy(qq[r] + (i * nb + b) * 16, qv[r][i] + 8 * b, 32);
          memcpy(qq[r] + (i * nb + b) * 16 + 8, qv[r][i] + 8 * b, 32);
        }
  }
#else
  const float* qq[SD_ATT_ROWS] = {0};
  const int paired = 0;
  char mx2[SD_ATT_ROWS];
#endif
  /* the scores, a block of keys for every row in turn */
  for (int64_t jb = 0; jb < Lend; jb += KB)
    for (int r = 0; r < nr; r++) {
      const int64_t L = start + t0 + r + 1;
      if (jb < L) scores_range(NQ, hkv, nb, kbase, (const float*)qq[r], paired, qv[r], m->attn_scale, jb,
                               jb + KB < L ? jb + KB : L, s + r * sstride, &mx2[r], &mx[r]);
    }
  SD_ALIGN(32) float sums[SD_ATT_ROWS][8];
  for (int r = 0; r < nr; r++) {
    const int64_t L = start + t0 + r + 1;
    float* sr = s + r * sstride;
#if defined(__AVX512F__)
    /* the two halves' maxima: j's keys in the low half, j+1's in the high half, in turn */
    if (paired && L >= 2)
      mx[r] = _mm256_max_ps(_mm512_castps512_ps256(mx2[r]),
                            _mm256_max_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(mx2[r]), 1)), mx[r]));
#endif
    for (int64_t j = 0; j < L; j++) _mm256_storeu_ps(sr + 8 * j, _mm256_sub_ps(_mm256_loadu_ps(sr + 8 * j), mx[r]));
    sd_exp_inplace(sr, 8 * L);
    /* tree8 over j, each lane its head's */
    __m256 l[8];
    for (int i = 0; i < 8; i++) l[i] = _mm256_setzero_ps();
    const int64_t n8 = L & ~(int64_t)7;
    int64_t j = 0;
    for (; j < n8; j += 8)
      for (int i = 0; i < 8; i++) l[i] = _mm256_add_ps(l[i], _mm256_loadu_ps(sr + 8 * (j + i)));
    __m256 sum = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(l[0], l[4]), _mm256_add_ps(l[2], l[6])),
                               _mm256_add_ps(_mm256_add_ps(l[1], l[5]), _mm256_add_ps(l[3], l[7])));
    for (; j < L; j++) sum = _mm256_add_ps(sum, _mm256_loadu_ps(sr + 8 * j));
    _mm256_store_ps(sums[r], sum);
  }
  /* the values: per few blocks of 8 elements of every head, a block of keys for every row in
     turn, each row's sums parked in `part` between key blocks */
  const float* vbase = vc + (int64_t)kvh * hd;
  float(*part)[8][4][16] = (float(*)[8][4][16])(s + SD_ATT_ROWS * (sstride + 16 * SD_ATT_MAX_HD)); /* [row][head][block][element] */
  int b = 0;
#if defined(__AVX512F__)
  /* BP pairs of blocks at once: a key's probabilities are broadcast once for BP*16 elements of
     every head instead of 16 (NQ*BP accumulators, BP values and a broadcast: <= 32 registers);
     each element's sum over j is the one below, in its order */
  const int BP = NQ <= 6 ? 4 : 3;
  for (; b + 2 * BP <= nb; b += 2 * BP)
    for (int64_t jb = 0; jb < Lend; jb += KB)
      for (int r = 0; r < nr; r++) {
        const int64_t L = start + t0 + r + 1, j1 = jb + KB < L ? jb + KB : L;
        if (jb >= L) continue;
        __m512 o[8][4];
        for (int i = 0; i < NQ; i++)
          for (int c = 0; c < BP; c++) o[i][c] = jb == 0 ? _mm512_setzero_ps() : _mm512_load_ps(part[r][i][c]);
        const float* sr = s + r * sstride;
        for (int64_t jj = jb; jj < j1; jj++) {
          sd_prefetch(vbase + (jj + SD_ATT_PREFETCH) * hkv + 8 * b, BP * 64);
          __m512 vb[4];
          for (int c = 0; c < BP; c++) vb[c] = _mm512_loadu_ps(vbase + jj * hkv + 8 * (b + 2 * c));
          const float* pj = sr + 8 * jj;
          for (int i = 0; i < NQ; i++) {
            const __m512 pi = _mm512_set1_ps(pj[i]);
            for (int c = 0; c < BP; c++) o[i][c] = _mm512_add_ps(o[i][c], _mm512_mul_ps(pi, vb[c]));
          }
        }
        if (j1 < L) {
          for (int i = 0; i < NQ; i++)
            for (int c = 0; c < BP; c++) _mm512_store_ps(part[r][i][c], o[i][c]);
        } else {
          for (int i = 0; i < nq; i++)
            for (int c = 0; c < BP; c++)
              _mm512_storeu_ps(att + ((t0 + r) * H + h0 + i) * hd + 8 * (b + 2 * c),
                               _mm512_div_ps(o[i][c], _mm512_set1_ps(sums[r][i])));
        }
      }
  for (; b + 2 <= nb; b += 2)
    for (int64_t jb = 0; jb < Lend; jb += KB)
      for (int r = 0; r < nr; r++) {
        const int64_t L = start + t0 + r + 1, j1 = jb + KB < L ? jb + KB : L;
        if (jb >= L) continue;
        __m512 o[8];
        for (int i = 0; i < 8; i++) o[i] = jb == 0 ? _mm512_setzero_ps() : _mm512_load_ps(part[r][i][0]);
        const float* sr = s + r * sstride;
        for (int64_t jj = jb; jj < j1; jj++) {
          sd_prefetch(vbase + (jj + SD_ATT_PREFETCH) * hkv + 8 * b, 64);
          const __m512 vb = _mm512_loadu_ps(vbase + jj * hkv + 8 * b);
          const float* pj = sr + 8 * jj;
          for (int i = 0; i < NQ; i++) o[i] = _mm512_add_ps(o[i], _mm512_mul_ps(_mm512_set1_ps(pj[i]), vb));
        }
        if (j1 < L) {
          for (int i = 0; i < 8; i++) _mm512_store_ps(part[r][i][0], o[i]);
        } else {
          for (int i = 0; i < nq; i++)
            _mm512_storeu_ps(att + ((t0 + r) * H + h0 + i) * hd + 8 * b, _mm512_div_ps(o[i], _mm512_set1_ps(sums[r][i])));
        }
      }
#endif
  /* 256 bits: two blocks a sweep where their accumulators fit the 16 registers (NQ <= 6: 12,
     two values and a broadcast), so the values are swept nb / 2 times instead of nb; each
     element's sum over j is the one below, in its order */
  if (NQ <= 6)
    for (; b + 2 <= nb; b += 2)
      for (int64_t jb = 0; jb < Lend; jb += KB)
        for (int r = 0; r < nr; r++) {
          const int64_t L = start + t0 + r + 1, j1 = jb + KB < L ? jb + KB : L;
          if (jb >= L) continue;
          __m256 o[6][2];
          for (int i = 0; i < NQ; i++)
            for (int c = 0; c < 2; c++) o[i][c] = jb == 0 ? _mm256_setzero_ps() : _mm256_load_ps(&part[r][i][c][0]);
          const float* sr = s + r * sstride;
          for (int64_t jj = jb; jj < j1; jj++) {
            sd_prefetch(vbase + (jj + SD_ATT_PREFETCH) * hkv + 8 * b, 64);
            const __m256 vb0 = _mm256_loadu_ps(vbase + jj * hkv + 8 * b), vb1 = _mm256_loadu_ps(vbase + jj * hkv + 8 * b + 8);
            const float* pj = sr + 8 * jj;
            for (int i = 0; i < NQ; i++) {
              const __m256 pi = _mm256_broadcast_ss(pj + i);
              o[i][0] = _mm256_add_ps(o[i][0], _mm256_mul_ps(pi, vb0));
              o[i][1] = _mm256_add_ps(o[i][1], _mm256_mul_ps(pi, vb1));
            }
          }
          if (j1 < L) {
            for (int i = 0; i < NQ; i++)
              for (int c = 0; c < 2; c++) _mm256_store_ps(&part[r][i][c][0], o[i][c]);
          } else {
            for (int i = 0; i < nq; i++)
              for (int c = 0; c < 2; c++)
                _mm256_storeu_ps(att + ((t0 + r) * H + h0 + i) * hd + 8 * (b + c),
                                 _mm256_div_ps(o[i][c], _mm256_set1_ps(sums[r][i])));
          }
        }
  for (; b < nb; b++)
    for (int64_t jb = 0; jb < Lend; jb += KB)
      for (int r = 0; r < nr; r++) {
        const int64_t L = start + t0 + r + 1, j1 = jb + KB < L ? jb + KB : L;
        if (jb >= L) continue;
        __m256 o[8];
        for (int i = 0; i < 8; i++) o[i] = jb == 0 ? _mm256_setzero_ps() : _mm256_load_ps(&part[r][i][0][0]);
        const float* sr = s + r * sstride;
        for (int64_t jj = jb; jj < j1; jj++) {
          if (!(b & 1)) sd_prefetch(vbase + (jj + SD_ATT_PREFETCH) * hkv + 8 * b, 64);
          const __m256 vb = _mm256_loadu_ps(vbase + jj * hkv + 8 * b);
          const float* pj = sr + 8 * jj;
          for (int i = 0; i < NQ; i++) o[i] = _mm256_add_ps(o[i], _mm256_mul_ps(_mm256_broadcast_ss(pj + i), vb));
        }
        if (j1 < L) {
          for (int i = 0; i < 8; i++) _mm256_store_ps(&part[r][i][0][0], o[i]);
        } else {
          for (int i = 0; i < nq; i++)
            _mm256_storeu_ps(att + ((t0 + r) * H + h0 + i) * hd + 8 * b, _mm256_div_ps(o[i], _mm256_set1_ps(sums[r][i])));
        }
      }
}
#undef KB

/* the groups of the models in use (GQA of 4-8 heads a key-value head) get their own lane
   count; others compute all 8 lanes and store nq */
static void attend_group(const sd_model* m, const float* q, const float* kc, const float* vc, int64_t t0, int nr,
                         int h0, int nq, int64_t start, float* s, int64_t L_max, float* att) {
  switch (nq) {
    case 7: attend_group_n(7, m, q, kc, vc, t0, nr, h0, nq, start, s, L_max, att); break;
    case 6: attend_group_n(6, m, q, kc, vc, t0, nr, h0, nq, start, s, L_max, att); break;
    case 5: attend_group_n(5, m, q, kc, vc, t0, nr, h0, nq, start, s, L_max, att); break;
    case 4: attend_group_n(4, m, q, kc, vc, t0, nr, h0, nq, start, s, L_max, att); break;
    default: attend_group_n(8, m, q, kc, vc, t0, nr, h0, nq, start, s, L_max, att); break;
  }
}

static void attention_tiles(const sd_model* m, const float* q, const float* kc, const float* vc, int64_t T,
                            int64_t start, float* att, float* scratch, int64_t L_max, int nt) {
  const int group = m->n_heads / m->n_kv_heads, per = (group + 7) / 8; /* tiles of <= 8 heads a group */
  /* rows a group: one while a key-value head's keys and values fit a quarter of an L2 of 2 MB
     (they stay there from row to row: grouping gained nothing there, measured); past that as
     many as keep an item a thread (a 9-row verification on 16 threads still spreads), at most
     SD_ATT_ROWS: with the keys prefetched the reads, not the balance, were what two items a
     thread cost (2 threads, 2,048 tokens: a 2-row pass 13.4 -> 9.7 ms, 4 rows 19.4 -> 16.4;
     speed notes, item 104). How the rows are grouped moves no number. */
  int64_t R = T * m->n_kv_heads * per / (int64_t)nt;
  R = L_max * m->head_dim * 2 * (int64_t)sizeof(float) <= (512 << 10) ? 1 : R < 1 ? 1 : R > SD_ATT_ROWS ? SD_ATT_ROWS : R;
  const int64_t row_groups = (T + R - 1) / R, items = row_groups * m->n_kv_heads * per;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
  for (int64_t it = 0; it < items; it++) {
#ifdef _OPENMP
    float* s = scratch + (int64_t)omp_get_thread_num() * SD_ATT_SCRATCH(L_max);
#else
    float* s = scratch;
#endif
    const int64_t t0 = it / (m->n_kv_heads * per) * R;
    const int nr = (int)(T - t0 < R ? T - t0 : R);
    const int r = (int)(it % (m->n_kv_heads * per)), kvh = r / per, part = r % per;
    const int h0 = kvh * group + 8 * part, nq = group - 8 * part < 8 ? group - 8 * part : 8;
    attend_group(m, q, kc, vc, t0, nr, h0, nq, start, s, L_max, att);
  }
}
#endif

void sd_attention(const sd_model* m, const float* q, const float* kc, const float* vc, int64_t T, int64_t start,
                  float* att, float* scratch, int64_t L_max, int nt) {
#if defined(__AVX2__)
  if (m->head_dim % 8 == 0) {
    attention_tiles(m, q, kc, vc, T, start, att, scratch, L_max, nt);
    return;
  }
#endif
  attention_rows(m, q, kc, vc, T, start, att, scratch, L_max, nt);
}
