/* What the CPU this runs on can do (build.py picks the build from it; the probe is built
   alone, in portable C, so it is always safe to ask). */
#include "sdcpu.h"

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#define SD_ON_X86 1
#if defined(_MSC_VER)
#include <intrin.h>
#else
#include <cpuid.h>
#endif
#elif defined(__aarch64__) || defined(_M_ARM64)
#define SD_ON_ARM 1
#if defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#endif
#endif

#if SD_ON_X86
static void cpuid(int leaf, int sub, unsigned r[4]) {
#if defined(_MSC_VER)
  int v[4];
  __cpuidex(v, leaf, sub);
  for (int i = 0; i < 4; i++) r[i] = (unsigned)v[i];
#else
  __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
#endif
}

static unsigned long long xgetbv0(void) {
#if defined(_MSC_VER)
  return _xgetbv(0);
#else
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((unsigned long long)hi << 32) | lo;
#endif
}
#endif

SD_EXPORT int sd_cpu_features(void) {
  int f = 0;
#if SD_ON_X86
  unsigned r[4];
  cpuid(0, 0, r);
  const unsigned max_leaf = r[0];
  cpuid(1, 0, r);
  const int osxsave = (r[2] >> 27) & 1;
  if (!osxsave) return 0;
  const unsigned long long xcr0 = xgetbv0();
  const int ymm_ok = (xcr0 & 6) == 6, zmm_ok = (xcr0 & 0xE6) == 0xE6;
  if (ymm_ok && ((r[2] >> 12) & 1)) f |= SD_CPU_FMA;
  if (ymm_ok && ((r[2] >> 29) & 1)) f |= SD_CPU_F16C;
  if (max_leaf >= 7) {
    cpuid(7, 0, r);
    if (ymm_ok && ((r[1] >> 5) & 1)) f |= SD_CPU_AVX2;
    if (zmm_ok && ((r[1] >> 16) & 1)) f |= SD_CPU_AVX512F;
    if (zmm_ok && ((r[1] >> 30) & 1)) f |= SD_CPU_AVX512BW;
    if (zmm_ok && ((r[1] >> 31) & 1)) f |= SD_CPU_AVX512VL;
    if (zmm_ok && ((r[2] >> 11) & 1)) f |= SD_CPU_AVX512VNNI;
    /* AMX-TILE and AMX-INT8, with the OS saving the tile state (XCR0 bits 17-18); Linux also
       asks each process to request it, which the amx build does when it loads */
    if (zmm_ok && ((r[3] >> 24) & 1) && ((r[3] >> 25) & 1) && ((xcr0 >> 17) & 3) == 3) f |= SD_CPU_AMXINT8;
    cpuid(7, 1, r);
    if (ymm_ok && ((r[0] >> 4) & 1)) f |= SD_CPU_AVXVNNI;
  }
#elif SD_ON_ARM
  f |= SD_CPU_NEON;
#if defined(__linux__)
  if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) f |= SD_CPU_DOTPROD;
#elif defined(__APPLE__)
  f |= SD_CPU_DOTPROD; /* every Apple Silicon core has it */
#endif
#endif
  return f;
}

SD_EXPORT void sd_cpu_ident(int32_t* out) {
  out[0] = out[1] = out[2] = 0;
#if SD_ON_X86
  unsigned r[4];
  cpuid(0, 0, r);
  /* the vendor string, ebx edx ecx: "GenuineIntel", "AuthenticAMD" */
  if (r[1] == 0x756e6547u && r[3] == 0x49656e69u && r[2] == 0x6c65746eu) out[0] = 1;
  if (r[1] == 0x68747541u && r[3] == 0x69746e65u && r[2] == 0x444d4163u) out[0] = 2;
  if (r[0] < 1) return;
  cpuid(1, 0, r);
  const unsigned base = (r[0] >> 8) & 0xF, ext = (r[0] >> 20) & 0xFF;
  out[1] = (int32_t)(base == 0xF ? base + ext : base);
  out[2] = (int32_t)(((r[0] >> 4) & 0xF) | ((base == 0x6 || base == 0xF) ? ((r[0] >> 16) & 0xF) << 4 : 0));
#endif
}
