/* The interleaved matmuls once more on ymm registers, for the avx512vnni build (and the amx
   build, which is avx512vnni's plus tiles): x8_x86.h compiled with one group of 8 weight rows a
   register (SD_XG 1), where quants.c's own copy takes two (zmm). Which passes take this copy is
   decided per CPU (build.py's narrow_rows, through sd_set_x8_narrow). On the AMD Zen 4 VM the
   draft's passes (Q4_0) of 3-9 rows measured 6-19% cheaper on this copy (speed notes, item
   115). The target's K-quant passes of 5-16 rows were 10-23% cheaper too while the blocks
   ahead were hinted into L1; hinted into L2 (sdcpu.h's sd_prefetch_l2) the zmm copy is the
   faster at every size (item 116), so there they no longer take this one. Below 5 rows both
   copies run the same direct path (ymm in both).
   Every lane sums the same integers and takes the same float steps in either width (x8_x86.h's
   header), so both copies give the same numbers bit for bit (tests/test_cpu_kernel.py, on a
   CPU with AVX512-VNNI). Other builds compile nothing here but the setter, which says they
   have no such copy; so do the tests' SIMDe builds of avx512vnni, whose ymm copy would be the
   avxvnni-simde build's x8 code exactly (the broadcast folded into vpdpbusd is native-only)
   and would add ~3 minutes of compiling to each. */
#include "sdcpu.h"

#include <string.h>

#if defined(__AVX2__) && defined(SD_VNNI) && SD_VNNI == 1 && !defined(SD_SIMDE_VNNI)
#define SD_X8_NARROW 1
#define SD_XG 1
#undef SD_AMX /* the tiles are the wide copy's: this one never takes them */
#define SD_AMX 0
#include <immintrin.h>
#include "x8_x86.h"

#define NARROW(t, TYPE, impl, kind)                                                                    \
  int sd_x8_narrow_##t(const sd_mat* w, const sd_act* a, int64_t M, int64_t n0, int64_t n1, float* y,  \
                       int64_t ldy) {                                                                   \
    return impl(TYPE, w, a, M, n0, n1, y, ldy);                                                         \
  }
SD_X8_TYPES(NARROW) /* sdcpu.h's list, as quants.c's instances */
#undef NARROW
#else
#define SD_X8_NARROW 0
#endif

/* [K-quants, 32-element blocks][first, last]: the pass sizes (activation rows) that take the ymm
   copy; none until the setter says */
int sd_x8_narrow_rows[2][2] = {{1, 0}, {1, 0}};

SD_EXPORT int sd_set_x8_narrow(int kind, int lo, int hi) {
  if (!SD_X8_NARROW || kind < 0 || kind > 1) return 0;
  sd_x8_narrow_rows[kind][0] = lo;
  sd_x8_narrow_rows[kind][1] = hi;
  return 1;
}
