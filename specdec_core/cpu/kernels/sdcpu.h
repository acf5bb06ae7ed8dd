/* The CPU backend's C side: GGUF block formats, 8-bit activations, integer dot products and
   the transformer forward of the families it covers (the why: the repository README's section
   "The CPU backend", and docs/speed-notes.md, items 20-31 and the issue 21 section).

   One source, several builds: build.py compiles these files once per instruction set
   (portable C, AVX2, AVX-VNNI, AVX512-VNNI, NEON) and loads the best one this CPU runs.
   Every build computes the same numbers bit for bit: integer sums are exact, and every
   floating-point operation happens in an order this file's comments define and the portable
   C spells out; SIMD code keeps that order lane by lane, and no build lets the compiler fuse
   a multiply and an add (-ffp-contract=off). That is what makes a row's result independent
   of how many rows share a pass, of the thread count, and of the instruction set.

   Float reduction order ("tree8"): a sum over n values keeps 8 lanes, lane l adding the
   values at l, l+8, l+16, ... in turn from +0.0; the lanes are then combined as
   ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)); values past the last multiple of 8 are added
   to that result one by one.
*/
#ifndef SDCPU_H
#define SDCPU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(_WIN32)
#define SD_EXPORT __declspec(dllexport)
#else
#define SD_EXPORT __attribute__((visibility("default")))
#endif

#if defined(_MSC_VER)
#define SD_INLINE static __forceinline
#define SD_ALIGN(n) __declspec(align(n))
#else
#define SD_INLINE static inline __attribute__((always_inline))
#define SD_ALIGN(n) __attribute__((aligned(n)))
#endif

/* ================================================================== the ABI
   Everything Python sees, declared here once: specdec_core/cpu/abi.py hands the text between
   the two marker comments to cffi, which builds the structs and calls from it (so this block
   stays plain C: no macro but SD_EXPORT, no preprocessor line). */
/* ABI begin (read by specdec_core/cpu/abi.py) */

/* ggml type ids, the GGUF tensor table's numbers (tests check them against gguf-py's) */
typedef enum {
  SD_F32 = 0, SD_F16 = 1, SD_Q4_0 = 2, SD_Q4_1 = 3, SD_Q5_0 = 6, SD_Q5_1 = 7, SD_Q8_0 = 8,
  SD_Q4_K = 12, SD_Q5_K = 13, SD_Q6_K = 14, SD_BF16 = 30
} sd_type;

/* how a matrix's blocks are laid out (see "interleaved weights" below) */
typedef enum { SD_LAYOUT_ROWS = 0, SD_LAYOUT_X8 = 1 } sd_layout;

/* what the int-returning entry points return */
typedef enum { SD_OK = 0, SD_EUNSUPPORTED = 1, SD_ESHAPE = 2, SD_ENOMEM = 3, SD_ETOKEN = 4 } sd_status;

/* cpu feature bits (sd_cpu_features) */
typedef enum {
  SD_CPU_AVX2 = 1 << 0, SD_CPU_FMA = 1 << 1, SD_CPU_F16C = 1 << 2, SD_CPU_AVX512F = 1 << 3,
  SD_CPU_AVX512BW = 1 << 4, SD_CPU_AVX512VL = 1 << 5, SD_CPU_AVX512VNNI = 1 << 6,
  SD_CPU_AVXVNNI = 1 << 7, SD_CPU_NEON = 1 << 8, SD_CPU_DOTPROD = 1 << 9, SD_CPU_AMXINT8 = 1 << 10
} sd_cpu_feature;

/* a weight matrix: N rows of K, each row whole blocks, in the file's rows or interleaved */
typedef struct {
  const void* data;
  int64_t row_bytes; /* a row's bytes in the file's layout (x8: a group's blocks take 8 of these) */
  int32_t type, rows, cols, layout;
} sd_mat;

/* one transformer block of the llama family (llama, mistral, qwen2, qwen3) */
typedef struct {
  const float *attn_norm, *ffn_norm;
  sd_mat wq, wk, wv, wo, wgate, wup, wdown;
  const float *bq, *bk, *bv; /* NULL when absent */
  const float *q_norm, *k_norm; /* per-head RMSNorm (qwen3), NULL when absent */
} sd_layer;

typedef struct {
  int32_t n_layers, d_model, n_heads, n_kv_heads, head_dim, d_ff, vocab;
  int32_t rope_neox; /* 1: rotate halves (qwen2's layout), 0: rotate pairs (llama's GGUF layout) */
  float rms_eps, attn_scale;
  const float* inv_freq; /* [head_dim/2] */
  sd_mat tok_embd, output; /* output: `vocab` rows (all tokens, or the chosen ones: FR-Spec) */
  const float* output_norm;
  const sd_layer* layers;
} sd_model;

/* entry points (pointers: NULL where said; counts and strides in elements) */
SD_EXPORT int sd_cpu_features(void); /* sd_cpu_feature bits of the CPU this runs on */
SD_EXPORT int sd_type_supported(int type);
SD_EXPORT int sd_x8_supported(int type); /* the interleaved layout exists for the type */
SD_EXPORT int sd_x8_native(void);        /* this build has x8 kernels of its own (else it unpacks rows) */
/* rows[i] (all rows in order where rows is NULL) of a matrix -> float32 out[n][K] */
SD_EXPORT int sd_dequantize(int type, const void* data, int64_t row_bytes, int layout, const int32_t* rows, int64_t n,
                            int64_t K, float* out);
SD_EXPORT void sd_quantize_act(const float* x, int64_t M, int64_t K, int blk, int8_t* qs, float* d, int16_t* sums);
/* y[m*ldy + n] = x[m] . row n (row rowmap[n] where rowmap is not NULL; not with x8) */
SD_EXPORT int sd_matmul(const float* x, int64_t M, int64_t K, int type, const void* w, int64_t N, int64_t row_bytes,
                        int layout, const int32_t* rowmap, float* y, int64_t ldy, int nthreads);
/* T tokens at positions start.. through the model; logits of the last n_logits rows */
SD_EXPORT int sd_forward(const sd_model* m, float* kcache, float* vcache, int64_t capacity, const int32_t* ids,
                         int64_t T, int64_t start, float* logits, int64_t n_logits, int nthreads);
SD_EXPORT void sd_exp(float* x, int64_t n);
/* rows -> Q4_0 (drafts only), written in `layout` */
SD_EXPORT int sd_requantize_q4_0(int type, const void* src, int64_t row_bytes, int64_t rows, int64_t K, void* out,
                                 int layout, int nthreads);
/* rows -> x8 (layout SD_LAYOUT_X8) or x8 -> rows (SD_LAYOUT_ROWS; src is then x8) */
SD_EXPORT int sd_repack(int type, const void* src, int64_t row_bytes, int64_t rows, int64_t K, void* out, int layout,
                        int nthreads);
/* kind 0 (K-quants) or 1 (32-element blocks): passes of lo..hi activation rows take the build's
   ymm copy of the interleaved matmuls (x8_narrow.c); 0 where the build has none */
SD_EXPORT int sd_set_x8_narrow(int kind, int lo, int hi);
/* the CPU's vendor (1 Intel, 2 AMD, 0 other), family and model (cpuid leaf 1, extended fields
   added), into out[3] */
SD_EXPORT void sd_cpu_ident(int32_t* out);
/* sizeof and offsetof of the structs above, as this compiler lays them out (for the tests) */
SD_EXPORT int sd_abi_layout(int64_t* out, int n);

/* ABI end */
/* ================================================================== */

/* -- block formats (byte layouts as llama.cpp's ggml-common.h; fp16 fields as raw bits) -- */
#define QK 32   /* elements per block of the 32-element types */
#define SD_ROW_CHUNK 16 /* the output rows a thread takes at a time are a multiple of this (sd_chunk_rows) */
#define QKK 256 /* elements per super-block of the K-quants */
#define SD_MB 64 /* activation rows a row kernel takes at a time (its accumulators live on the stack) */

typedef struct { uint16_t d; uint8_t qs[16]; } blk_q4_0;                     /* w = d*(q-8)  */
typedef struct { uint16_t d, m; uint8_t qs[16]; } blk_q4_1;                  /* w = d*q + m  */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_0;      /* w = d*(q-16) */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_1;   /* w = d*q + m  */
typedef struct { uint16_t d; int8_t qs[32]; } blk_q8_0;                      /* w = d*q      */
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } blk_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } blk_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } blk_q6_K;

/* -- activations, quantized per row --
   A row of K floats becomes K int8 codes, one float scale per block of `blk` (256 for
   K-quant weights, 32 for the others), and the sum of every 16 codes (int16):
     amax = max |x|;  d = amax / 127;  q = nearest-even(x * (127 / amax)), 0 where amax is 0. */
typedef struct {
  int8_t* qs;    /* [M][K] */
  float* d;      /* [M][K/blk] */
  int16_t* sums; /* [M][K/16] */
  int64_t K;
  int blk;
  /* [M][K/32]: the sum of every 32 codes. Every maker of a K-quant activation (blk 256: sd_matmul,
     sd_forward) allocates it, and sd_quantize_rows fills it where it is not NULL; the 32-element
     types' leave it NULL. Q4_K's mins weigh the codes' sums by 32 elements: with these the
     interleaved kernels' mins term (x8_x86.h's unit and direct path, which read it) takes one
     vpdpwssd per two mins */
  int16_t* sums32;
} sd_act;

/* -- interleaved weights ("x8"): rows 8g..8g+7 ("group g") stored block by block, block b of
   all 8 rows side by side, 4 bytes of each row in turn, so that one 32-byte register holds 8
   rows x 4 codes and every output row has its own 32-bit lane (no horizontal sums). Group g's
   block b lies at (g * nb + b) * sizeof(x8 block), the same bytes as the rows it came from.
   Repacked in memory at load (sd_repack) for the types below; other types, and matrices whose
   row count is not a multiple of 8, keep the file's rows (sd_layout in the ABI block). -- */

typedef struct { uint16_t d[8], dmin[8]; uint8_t scales[96]; uint8_t qs[1024]; } x8_q4_K;
/* qs[(c*8 + k)*32 + 4r + i] = row r's qs[32c + 4k + i]; scales: see quants.c's x8 repack */
typedef struct { uint8_t ql[1024]; uint8_t qh[512]; int8_t scales[128]; uint16_t d[8]; } x8_q6_K;
/* ql[((h*2 + p)*8 + k)*32 + 4r + i] = row r's ql[64h + 32p + 4k + i];
   qh[(h*8 + k)*32 + 4r + i] = row r's qh[32h + 4k + i];  scales[g*8 + r] = row r's scales[g] */
typedef struct { uint16_t d[8]; uint8_t qs[128]; } x8_q4_0;       /* qs[k*32 + 4r + i] = row r's qs[4k + i] */
typedef struct { uint16_t d[8]; uint8_t qh[32]; uint8_t qs[128]; } x8_q5_0;
/* qs as x8_q4_0; qh[4r + i] bit c = row r's high bit of element 4c + i (c = 0..7) */
typedef struct { uint16_t d[8]; int8_t qs[256]; } x8_q8_0;       /* qs[c*32 + 4r + i] = row r's qs[4c + i] */

/* -- scalars of the formats (inline: every kernel decodes block scales with them) -- */

SD_INLINE float sd_fp16_to_fp32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF, bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13); /* inf / nan */
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else { /* subnormal half: normalise */
    exp = 113;
    while (!(man & 0x400)) { man <<= 1; exp--; }
    bits = sign | (exp << 23) | ((man & 0x3FF) << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

SD_INLINE float sd_bf16_to_fp32(uint16_t h) {
  const uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Q4_K / Q5_K's 6-bit scale and min of sub-block j (llama.cpp's get_scale_min_k4) */
SD_INLINE void scale_min_k4(int j, const uint8_t* s, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

#if defined(__AVX2__)
#include <immintrin.h>
/* the cache lines of n bytes at p, on their way to L1: a hint, never a fault, no number moved
   (the interleaved matmuls' next blocks, x8_x86.h; attention's keys ahead, attention.c) */
SD_INLINE void sd_prefetch(const void* p, size_t n) {
  for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char*)p + o, _MM_HINT_T0);
}
/* the same on their way to L2 only. Whole blocks hinted into L1 (27 lines a Q6_K block) left the
   Zen 4 VM's matmuls of 1-16 rows reading memory and computing in turn, not at once -- likely
   the L1's few miss buffers, each held by a line until it lands, with the block's own loads
   waiting behind them; hinted into L2 their passes were 15-26% cheaper (speed notes, item 116) */
SD_INLINE void sd_prefetch_l2(const void* p, size_t n) {
  for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char*)p + o, _MM_HINT_T1);
}
/* Keep an accumulator in its register, in program order: without it GCC reassociates a row's
   chain of integer adds into a tree, computes every product first and spills them to the stack
   (measured: 2x slower multi-row passes). Integer adds are exact, so only speed is at stake. */
#if defined(__GNUC__)
#define SD_KEEP(v) __asm__("" : "+x"(v))
#else
#define SD_KEEP(v) (void)0
#endif
#endif

/* -- the type traits: everything the kernel does with one block type, in one table (quants.c's
   type_traits, indexed by the type id; the shape of llama.cpp's ggml-cpu type_traits_cpu). A
   type the table has no entry for is refused with SD_EUNSUPPORTED by every entry point: no
   kernel ever runs on another type's blocks. The dot products are the build's: each of
   dot_portable.h, dot_x86.h (AVX2; AVX-VNNI and AVX512-VNNI through SD_VNNI) and dot_neon.h
   defines one per block type, x8_x86.h and x8_neon.h one per interleaved type (the portable
   build unpacks rows for those), and the table takes whichever this build compiled. -- */
#define SD_TYPE_COUNT 31 /* type ids 0..30 (SD_BF16 the last) */

/* a row of K elements (whole blocks) -> K floats: gguf-py's numbers (blocks.c) */
typedef void sd_to_float(const void* row, int64_t K, float* y);
/* rows [0, M) of x [M][K] -> the activations a dot product takes, into out's rows row0.. */
typedef void sd_from_float(const float* x, int64_t M, int64_t K, sd_act* out, int64_t row0);
/* one weight row (the file's layout) against activation rows [0, M) (M <= SD_MB) into y[m * ldy]:
   quantized activations `a` for the block types, float rows `x` (with `wbuf`, a scratch row of K
   floats) for the float types */
typedef void sd_vec_dot(const uint8_t* wrow, int64_t K, const sd_act* a, const float* x, int64_t M, float* y,
                        int64_t ldy, float* wbuf);
/* 8 row blocks <-> one interleaved block, both ways (to_x8) through one byte map (blocks.c) */
typedef void sd_x8_map(uint8_t* const blocks[8], uint8_t* x8, int to_x8);
/* rows [n0, n1) (multiples of 8) of an interleaved matrix against M <= SD_MB activation rows:
   0, or SD_ENOMEM */
typedef int sd_vec_dot_x8(const sd_mat* w, const sd_act* a, int64_t M, int64_t n0, int64_t n1, float* y, int64_t ldy);

typedef struct {
  int blck_size;             /* elements per block */
  int type_size;             /* bytes per block */
  int act_blk;               /* the activations vec_dot takes: int8 codes in blocks of 32 or 256; 0: floats */
  sd_from_float* from_float; /* float rows -> those activations (NULL for float activations) */
  sd_to_float* to_float;
  sd_vec_dot* vec_dot;
  sd_x8_map* x8_map;         /* NULL: the type has no interleaved layout */
  sd_vec_dot_x8* vec_dot_x8; /* set exactly where x8_map is */
} sd_type_traits;

const sd_type_traits* sd_traits(int type); /* NULL for a type the kernel does not read */
/* a matrix the kernel can multiply as it is: SD_OK, SD_EUNSUPPORTED (type, or the type in this
   layout) or SD_ESHAPE (rows or columns) */
int sd_mat_check(const sd_mat* w);

/* blocks.c: the formats' functions the table points at */
sd_to_float sd_to_float_f32, sd_to_float_f16, sd_to_float_bf16, sd_to_float_q4_0, sd_to_float_q4_1, sd_to_float_q5_0,
    sd_to_float_q5_1, sd_to_float_q8_0, sd_to_float_q4_K, sd_to_float_q5_K, sd_to_float_q6_K;
sd_x8_map sd_x8_map_q4_0, sd_x8_map_q5_0, sd_x8_map_q8_0, sd_x8_map_q4_K, sd_x8_map_q6_K;
void sd_x8_row(const sd_mat* w, int64_t n, uint8_t* row); /* row n of an x8 matrix, in the file's layout */
void* sd_alloc(size_t n); /* 64-byte aligned (activation rows: no load splits a cache line); NULL on failure */
void sd_free(void* p);

/* The types with an interleaved (x8) layout, as X(name, type id, matmul, kind) -- kind 0 the
   K-quants, 1 the 32-element blocks (sd_x8_narrow_rows' index): the one list that quants.c's
   matmul instances and x8_narrow.c's ymm copies are made from, so the two cannot drift apart.
   (quants.c's table marks the same types BLOCK_TYPE_X8.) */
#define SD_X8_TYPES(X)                                                                          \
  X(q4_0, SD_Q4_0, mm_x8_b, 1) X(q5_0, SD_Q5_0, mm_x8_b, 1) X(q8_0, SD_Q8_0, mm_x8_b, 1)        \
  X(q4_K, SD_Q4_K, mm_x8_k, 0) X(q6_K, SD_Q6_K, mm_x8_k, 0)

/* x8_narrow.c: the interleaved matmuls on ymm registers in the avx512vnni build (sd_vec_dot_x8
   each), and the pass sizes that take them: [K-quants, 32-element blocks][first, last] */
#define SD_X8_NARROW_DECL(t, TYPE, impl, kind) sd_vec_dot_x8 sd_x8_narrow_##t;
SD_X8_TYPES(SD_X8_NARROW_DECL)
#undef SD_X8_NARROW_DECL
extern int sd_x8_narrow_rows[2][2];

/* quants.c */
void sd_quantize_rows(const float* x, int64_t M, int64_t K, int blk, sd_act* out, int64_t row0);
/* y[m*ldy + n] for rows m < M of `a` (or float rows `x` when the type takes float inputs) and
   weight rows n in [n0, n1) (through rowmap when not NULL): 0, SD_EUNSUPPORTED or SD_ENOMEM */
int sd_mm_rows(const sd_mat* w, const int32_t* rowmap, const sd_act* a, const float* x, int64_t M,
               int64_t n0, int64_t n1, float* y, int64_t ldy);
int64_t sd_chunk_rows(const sd_mat* w, int nthreads);
/* attention.c: att [T][heads][head_dim] for queries q (the same shape) at positions start.., over
   the positional caches kc/vc [capacity][kv_heads * head_dim] of one layer; scratch holds
   nthreads * SD_ATT_SCRATCH(L_max) floats (L_max = start + T), 64-byte aligned */
#define SD_ATT_LANES 8
#define SD_ATT_ROWS 8 /* rows of a pass attended together (the keys and values read once for them) */
#define SD_ATT_MAX_HD 256 /* the 512-bit tile keeps a head this long in its scratch; longer ones take 256 bits */
#define SD_ATT_STRIDE(L_max) ((((int64_t)(L_max)) * SD_ATT_LANES + 15) & ~(int64_t)15)
#define SD_ATT_SCRATCH(L_max) (SD_ATT_ROWS * (SD_ATT_STRIDE(L_max) + 16 * SD_ATT_MAX_HD + 8 * 4 * 16))
void sd_attention(const sd_model* m, const float* q, const float* kc, const float* vc, int64_t T, int64_t start,
                  float* att, float* scratch, int64_t L_max, int nt); /* output rows of w a thread takes at a time */
float sd_tree8_dot(const float* a, const float* b, int64_t n);
float sd_tree8_sumsq(const float* a, int64_t n);
void sd_exp_inplace(float* x, int64_t n); /* x = e^x, the same polynomial in every build */

#endif
