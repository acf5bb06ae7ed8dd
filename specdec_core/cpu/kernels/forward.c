/* The forward pass of the llama family (llama, mistral, qwen2, qwen3) on GGUF weights.

   One call per pass, so a decode step costs no Python per layer. Every row's numbers are its
   own: norms, RoPE, attention and the MLP's elementwise work go row by row (attention over the
   positions up to that row's), and the matmuls are batch-invariant (quants.c). So a token's
   logits do not depend on how many tokens share the pass, which is what keeps greedy
   speculative decoding equal to standard decoding; a long prompt is cut into chunks of CHUNK
   rows for the same reason at no cost to exactness.

   Float order, as in sdcpu.h: RMSNorm  r = 1 / sqrt(tree8(x*x) / n + eps),  y = w * (x * r);
   attention  s_j = tree8(q . k_j) * scale,  p_j = e^(s_j - max),  out = (sum_j p_j v_j) / tree8(p)
   with the v-sum taken over j in order (attention.c);  SiLU  g / (1 + e^-g), times up. */
#include "sdcpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CHUNK 64

/* SD_PROFILE=1: seconds spent per phase, printed at exit (for the speed notes; off by default) */
#include <stdio.h>
#include <time.h>
static double prof_t[6];
static const char* prof_name[6] = {"qkv", "attention", "o", "gate/up", "down", "head+other"};
static int prof_on = -1;
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
static void prof_dump(void) {
  for (int i = 0; i < 6; i++) fprintf(stderr, "sd_profile %-10s %.3f s\n", prof_name[i], prof_t[i]);
}
#define PROF_START() double _pt = prof_on > 0 ? now_s() : 0
#define PROF_END(i) do { if (prof_on > 0) { double _n = now_s(); prof_t[i] += _n - _pt; _pt = _n; } } while (0)

typedef struct {
  int fail; /* a kernel failed (SD_ENOMEM): the pass reports its code */
  sd_act a256, a32;
  float *x, *h, *q, *k, *v, *att, *g, *u, *tmp, *scores, *cs, *sn;
} work;

static void* xmalloc(size_t n, int* fail) {
  void* p = sd_alloc(n);
  if (!p) *fail = 1;
  return p;
}

static void rmsnorm_row(const float* x, const float* w, int64_t n, float eps, float* y) {
  const float r = 1.0f / sqrtf(sd_tree8_sumsq(x, n) / (float)n + eps);
  for (int64_t i = 0; i < n; i++) y[i] = w[i] * (x[i] * r);
}

/* y_i[T][rows_i] = x[T][K] @ W_i.T for matrices sharing one input: it is quantized once per
   activation format, and the threads split the concatenated output rows */
static void matmul_group(int nw, const sd_mat* const* ws, float* const* outs, const float* x, int64_t T, int64_t K,
                         work* wk, int nt) {
  sd_from_float *q256 = NULL, *q32 = NULL; /* how each activation format is made, where one is needed */
  int64_t nch[4], ch[4], chunks = 0;
  for (int i = 0; i < nw; i++) {
    const sd_type_traits* t = sd_traits(ws[i]->type); /* sd_forward checked every matrix */
    if (t->act_blk == QKK) q256 = t->from_float;
    if (t->act_blk == QK) q32 = t->from_float;
    ch[i] = sd_chunk_rows(ws[i], nt);
    nch[i] = (ws[i]->rows + ch[i] - 1) / ch[i];
    chunks += nch[i];
  }
  wk->a256.K = wk->a32.K = K;
#pragma omp parallel num_threads(nt)
  {
#ifdef _OPENMP
    const int t = omp_get_thread_num(), TT = omp_get_num_threads();
#else
    const int t = 0, TT = 1;
#endif
    const int64_t r0 = T * t / TT, r1 = T * (t + 1) / TT;
    if (q256) q256(x + r0 * K, r1 - r0, K, &wk->a256, r0);
    if (q32) q32(x + r0 * K, r1 - r0, K, &wk->a32, r0);
#pragma omp barrier
    /* chunks of output rows handed out as threads come free: where another program takes a
       core for a while, the other thread carries on instead of waiting for a fixed half */
#pragma omp for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; c++) {
      int i = 0;
      int64_t cc = c;
      while (cc >= nch[i]) cc -= nch[i++];
      const int64_t rows = ws[i]->rows, lo = cc * ch[i], hi = lo + ch[i] < rows ? lo + ch[i] : rows;
      const sd_act* a = sd_traits(ws[i]->type)->act_blk == QKK ? &wk->a256 : &wk->a32;
      const int rc = sd_mm_rows(ws[i], NULL, a, x, T, lo, hi, outs[i], rows);
      if (rc) {
#pragma omp atomic write
        wk->fail = rc;
      }
    }
  }
}

static void add_bias(float* y, const float* b, int64_t T, int64_t n) {
  if (!b) return;
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < n; i++) y[t * n + i] = y[t * n + i] + b[i];
}

/* rotate each head of rows [T][heads*hd] at its row's position (cs/sn: [T][hd/2]) */
static void rope(float* y, int64_t T, int heads, int hd, int neox, const float* cs, const float* sn) {
  const int half = hd / 2;
  for (int64_t t = 0; t < T; t++)
    for (int h = 0; h < heads; h++) {
      float* v = y + (t * heads + h) * hd;
      const float* c = cs + t * half;
      const float* s = sn + t * half;
      for (int i = 0; i < half; i++) {
        const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        const float x0 = v[i0], x1 = v[i1];
        v[i0] = x0 * c[i] - x1 * s[i];
        v[i1] = x1 * c[i] + x0 * s[i];
      }
    }
}

static void head_norm(float* y, const float* w, int64_t T, int heads, int hd, float eps) {
  if (!w) return;
  for (int64_t i = 0; i < T * heads; i++) rmsnorm_row(y + i * hd, w, hd, eps, y + i * hd);
}

/* rows [0, T) of one chunk at positions start.. ; logits for those rows at global index >= first_logit */
static int chunk(const sd_model* m, float* kc, float* vc, int64_t cap, const int32_t* ids, int64_t T, int64_t start,
                 work* w, int64_t logit_from, float* logits, int nt) {
  const int64_t D = m->d_model, F = m->d_ff, hd = m->head_dim, H = m->n_heads;
  const int64_t hq = H * hd, hkv = (int64_t)m->n_kv_heads * hd;
  for (int64_t t = 0; t < T; t++) {
    const int64_t id = ids[t];
    if (id < 0 || id >= m->tok_embd.rows) return SD_ETOKEN;
    sd_traits(m->tok_embd.type)->to_float((const uint8_t*)m->tok_embd.data + id * m->tok_embd.row_bytes, D, w->x + t * D);
  }
  const int64_t half = hd / 2;
  for (int64_t t = 0; t < T; t++)
    for (int64_t i = 0; i < half; i++) {
      const float a = (float)(start + t) * m->inv_freq[i];
      w->cs[t * half + i] = cosf(a);
      w->sn[t * half + i] = sinf(a);
    }
  if (prof_on < 0) {
    prof_on = getenv("SD_PROFILE") != NULL;
    if (prof_on) atexit(prof_dump);
  }
  for (int l = 0; l < m->n_layers; l++) {
    PROF_START();
    const sd_layer* L = m->layers + l;
    float* kl = kc + (int64_t)l * cap * hkv;
    float* vl = vc + (int64_t)l * cap * hkv;
    for (int64_t t = 0; t < T; t++) rmsnorm_row(w->x + t * D, L->attn_norm, D, m->rms_eps, w->h + t * D);
    {
      const sd_mat* ws[3] = {&L->wq, &L->wk, &L->wv};
      float* outs[3] = {w->q, w->k, w->v};
      matmul_group(3, ws, outs, w->h, T, D, w, nt);
    }
    add_bias(w->q, L->bq, T, hq);
    add_bias(w->k, L->bk, T, hkv);
    add_bias(w->v, L->bv, T, hkv);
    head_norm(w->q, L->q_norm, T, (int)H, (int)hd, m->rms_eps);
    head_norm(w->k, L->k_norm, T, m->n_kv_heads, (int)hd, m->rms_eps);
    rope(w->q, T, (int)H, (int)hd, m->rope_neox, w->cs, w->sn);
    rope(w->k, T, m->n_kv_heads, (int)hd, m->rope_neox, w->cs, w->sn);
    PROF_END(0);
    memcpy(kl + start * hkv, w->k, sizeof(float) * T * hkv);
    memcpy(vl + start * hkv, w->v, sizeof(float) * T * hkv);
    sd_attention(m, w->q, kl, vl, T, start, w->att, w->scores, start + T, nt);
    PROF_END(1);
    {
      const sd_mat* ws[1] = {&L->wo};
      float* outs[1] = {w->tmp};
      matmul_group(1, ws, outs, w->att, T, hq, w, nt);
    }
    PROF_END(2);
    for (int64_t i = 0; i < T * D; i++) w->x[i] = w->x[i] + w->tmp[i];
    for (int64_t t = 0; t < T; t++) rmsnorm_row(w->x + t * D, L->ffn_norm, D, m->rms_eps, w->h + t * D);
    {
      const sd_mat* ws[2] = {&L->wgate, &L->wup};
      float* outs[2] = {w->g, w->u};
      matmul_group(2, ws, outs, w->h, T, D, w, nt);
    }
    PROF_END(3);
    /* SiLU(g) * u, with e^-g taken in place in u's stead first */
    for (int64_t i = 0; i < T * F; i++) w->tmp[i] = -w->g[i];
    /* tmp may be shorter than T*F: it is sized for it (see sd_forward) */
    sd_exp_inplace(w->tmp, T * F);
    for (int64_t i = 0; i < T * F; i++) w->g[i] = (w->g[i] / (1.0f + w->tmp[i])) * w->u[i];
    {
      const sd_mat* ws[1] = {&L->wdown};
      float* outs[1] = {w->tmp};
      matmul_group(1, ws, outs, w->g, T, F, w, nt);
    }
    PROF_END(4);
    for (int64_t i = 0; i < T * D; i++) w->x[i] = w->x[i] + w->tmp[i];
  }
  PROF_START();
  /* the head, for the rows that want logits */
  const int64_t first = logit_from > start ? logit_from - start : 0;
  if (first < T) {
    const int64_t n = T - first;
    for (int64_t t = 0; t < n; t++) rmsnorm_row(w->x + (first + t) * D, m->output_norm, D, m->rms_eps, w->h + t * D);
    const sd_mat* ws[1] = {&m->output};
    float* outs[1] = {logits + (start + first - logit_from) * (int64_t)m->vocab};
    matmul_group(1, ws, outs, w->h, n, D, w, nt);
  }
  PROF_END(5);
  return w->fail;
}

/* every matrix the kernel multiplies (and the embedding it looks rows up in), as it is laid out,
   before anything is computed: SD_OK, or the first refusal (sd_mat_check's codes) */
static int check_matrices(const sd_model* m) {
  if (!sd_traits(m->tok_embd.type) || m->tok_embd.layout != SD_LAYOUT_ROWS) return SD_EUNSUPPORTED;
  int rc = sd_mat_check(&m->output);
  for (int l = 0; l < m->n_layers && !rc; l++) {
    const sd_layer* L = m->layers + l;
    const sd_mat* ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->wgate, &L->wup, &L->wdown};
    for (int i = 0; i < 7 && !rc; i++) rc = sd_mat_check(ws[i]);
  }
  return rc;
}

SD_EXPORT int sd_forward(const sd_model* m, float* kc, float* vc, int64_t capacity, const int32_t* ids, int64_t T,
                         int64_t start, float* logits, int64_t n_logits, int nthreads) {
  if (T < 1 || n_logits < 0 || n_logits > T || start + T > capacity) return SD_ESHAPE;
  const int bad = check_matrices(m);
  if (bad) return bad;
  if (nthreads < 1) nthreads = 1;
  const int64_t C = T < CHUNK ? T : CHUNK;
  const int64_t D = m->d_model, F = m->d_ff, hd = m->head_dim;
  const int64_t hq = (int64_t)m->n_heads * hd, hkv = (int64_t)m->n_kv_heads * hd;
  const int64_t Kmax = F > hq ? (F > D ? F : D) : (hq > D ? hq : D);
  const int64_t wide = F > D ? F : D;
  int fail = 0;
  work w;
  w.fail = 0;
  w.a256.qs = (int8_t*)xmalloc((size_t)(C * Kmax), &fail);
  w.a256.d = (float*)xmalloc(sizeof(float) * (size_t)(C * (Kmax / QKK + 1)), &fail);
  w.a256.sums = (int16_t*)xmalloc(sizeof(int16_t) * (size_t)(C * (Kmax / 16 + 1)), &fail);
  w.a256.sums32 = (int16_t*)xmalloc(sizeof(int16_t) * (size_t)(C * (Kmax / 32 + 1)), &fail);
  w.a256.blk = QKK;
  w.a32.qs = (int8_t*)xmalloc((size_t)(C * Kmax), &fail);
  w.a32.d = (float*)xmalloc(sizeof(float) * (size_t)(C * (Kmax / QK + 1)), &fail);
  w.a32.sums = (int16_t*)xmalloc(sizeof(int16_t) * (size_t)(C * (Kmax / 16 + 1)), &fail);
  w.a32.sums32 = NULL; /* the 32-element types' activations: their blocks are the sums' */
  w.a32.blk = QK;
  w.x = (float*)xmalloc(sizeof(float) * C * D, &fail);
  w.h = (float*)xmalloc(sizeof(float) * C * D, &fail);
  w.q = (float*)xmalloc(sizeof(float) * C * hq, &fail);
  w.k = (float*)xmalloc(sizeof(float) * C * hkv, &fail);
  w.v = (float*)xmalloc(sizeof(float) * C * hkv, &fail);
  w.att = (float*)xmalloc(sizeof(float) * C * hq, &fail);
  w.g = (float*)xmalloc(sizeof(float) * C * F, &fail);
  w.u = (float*)xmalloc(sizeof(float) * C * F, &fail);
  w.tmp = (float*)xmalloc(sizeof(float) * C * wide, &fail);
  w.scores = (float*)xmalloc(sizeof(float) * (size_t)nthreads * SD_ATT_SCRATCH(start + T), &fail);
  w.cs = (float*)xmalloc(sizeof(float) * C * (hd / 2), &fail);
  w.sn = (float*)xmalloc(sizeof(float) * C * (hd / 2), &fail);
  int rc = fail ? SD_ENOMEM : SD_OK;
  for (int64_t c0 = 0; c0 < T && rc == 0; c0 += C) {
    const int64_t n = T - c0 < C ? T - c0 : C;
    rc = chunk(m, kc, vc, capacity, ids + c0, n, start + c0, &w, start + T - n_logits, logits, nthreads);
  }
  void* bufs[] = {w.a256.qs, w.a256.d, w.a256.sums, w.a256.sums32, w.a32.qs, w.a32.d, w.a32.sums, w.x, w.h, w.q, w.k, w.v,
                  w.att, w.g, w.u, w.tmp, w.scores, w.cs, w.sn};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) sd_free(bufs[i]);
  return rc;
}
