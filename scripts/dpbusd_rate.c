/* How fast this core runs vpdpbusd, the instruction the avx512vnni build's matmuls are made of
   (specdec_core/cpu/kernels/x8_x86.h): what an extra activation row -- a verified row, a token
   of the draft's read -- costs at the least once a pass is no longer waiting on memory.

       gcc -O2 -o /tmp/dpbusd_rate scripts/dpbusd_rate.c && /tmp/dpbusd_rate

   Prints the time of a ymm and a zmm vpdpbusd (EVEX, as the build has them: AMD Zen 4 lacks
   AVX-VNNI's VEX form) over 12 independent accumulators (throughput), of one accumulator
   (latency), and the clock a chain of dependent adds runs at; from those, the int8
   multiply-accumulates a cycle and a second one core can do (speed notes, item 78). One
   thread: run it on an otherwise idle machine, twice. */
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  const long N = 200000000;
  /* twelve independent accumulators in fixed registers, written in asm so that the compiler's
     register moves do not share the front end with them */
#define DP12(W, R)                                                                                  \
  "vpdpbusd %%" W "0, %%" W "1, %%" W "4\n\t vpdpbusd %%" W "0, %%" W "1, %%" W "5\n\t"            \
  "vpdpbusd %%" W "0, %%" W "1, %%" W "6\n\t vpdpbusd %%" W "0, %%" W "1, %%" W "7\n\t"            \
  "vpdpbusd %%" W "0, %%" W "1, %%" W "8\n\t vpdpbusd %%" W "0, %%" W "1, %%" W "9\n\t"            \
  "vpdpbusd %%" W "0, %%" W "1, %%" W "10\n\t vpdpbusd %%" W "0, %%" W "1, %%" W "11\n\t"          \
  "vpdpbusd %%" W "0, %%" W "1, %%" W "12\n\t vpdpbusd %%" W "0, %%" W "1, %%" W "13\n\t"          \
  "vpdpbusd %%" W "0, %%" W "1, %%" W "14\n\t vpdpbusd %%" W "0, %%" W "1, %%" W "15\n\t"
  double t = now();
  for (long n = 0; n < N; n++)
    __asm__ volatile(DP12("ymm", 0) ::: "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
                     "xmm13", "xmm14", "xmm15");
  const double ymm = (now() - t) / N / 12 * 1e9;
  t = now();
  for (long n = 0; n < N / 2; n++)
    __asm__ volatile(DP12("zmm", 0) ::: "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
                     "xmm13", "xmm14", "xmm15");
  const double zmm = (now() - t) / (N / 2) / 12 * 1e9;
  t = now();
  for (long n = 0; n < N / 4; n++)
    __asm__ volatile("vpdpbusd %%ymm0, %%ymm1, %%ymm4\n\t vpdpbusd %%ymm0, %%ymm1, %%ymm4\n\t"
                     "vpdpbusd %%ymm0, %%ymm1, %%ymm4\n\t vpdpbusd %%ymm0, %%ymm1, %%ymm4" ::: "xmm4");
  const double lat = (now() - t) / (N / 4) / 4 * 1e9;
  long x = 0;
  t = now();
  for (long n = 0; n < N; n++) __asm__ volatile("add $1, %0\n\t add $1, %0\n\t add $1, %0\n\t add $1, %0" : "+r"(x));
  const double ghz = 4.0 * N / (now() - t) / 1e9;

  printf("clock ~%.2f GHz (a dependent add a cycle)\n", ghz);
  printf("vpdpbusd ymm: %.3f ns = %.2f cycles each, 12 chains -> %.1f int8 MACs a cycle, %.0f G a second a core\n", ymm,
         ymm * ghz, 32 / (ymm * ghz), 32 / ymm);
  printf("vpdpbusd zmm: %.3f ns = %.2f cycles each, 12 chains -> %.1f int8 MACs a cycle, %.0f G a second a core\n", zmm,
         zmm * ghz, 64 / (zmm * ghz), 64 / zmm);
  printf("vpdpbusd latency: %.2f cycles (one chain; %ld adds)\n", lat * ghz, x);
  return 0;
}
