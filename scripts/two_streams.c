/* How fast this machine reads memory as one stream, and as two streams taken block by block a
   distance G apart -- the order in which a kernel reads two groups of interleaved weights at
   once (speed notes, item 111: on the AMD Zen 4 VM two streams a few KB apart read at 55-70%
   of one stream's rate, 58 KB and more apart at full rate).

       gcc -O2 -mavx2 -o /tmp/two_streams scripts/two_streams.c && /tmp/two_streams

   One thread, 256 MiB read once a line; run it on an otherwise idle machine. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
  const size_t total = (size_t)256 << 20, B = 1152; /* a Q4_K x8 super-block */
  char* buf = aligned_alloc(4096, total);
  if (!buf) return 1;
  memset(buf, 1, total);
  const size_t gaps[] = {4096, 6912, 8192, 13824, 58800, 65536, 1 << 20};
  for (size_t gi = 0; gi < sizeof gaps / sizeof gaps[0]; gi++) {
    const size_t G = gaps[gi];
    double gbs[2];
    for (int two = 0; two < 2; two++) {
      __m256i acc = _mm256_setzero_si256();
      const double t = now();
      for (size_t base = 0; base + 2 * G <= total; base += 2 * G) {
        if (!two) { /* one stream: the first G bytes, then the next G */
          for (size_t o = 0; o < 2 * G; o += 32) acc = _mm256_add_epi8(acc, _mm256_loadu_si256((const __m256i*)(buf + base + o)));
        } else { /* two streams: block b of the first G bytes, then block b of the next G */
          for (size_t b = 0; b < G; b += B)
            for (int i = 0; i < 2; i++)
              for (size_t o = 0; o < B && b + o < G; o += 32)
                acc = _mm256_add_epi8(acc, _mm256_loadu_si256((const __m256i*)(buf + base + i * G + b + o)));
        }
      }
      gbs[two] = total / (now() - t) / 1e9;
      int s[8];
      _mm256_storeu_si256((__m256i*)s, acc);
      if (s[0] == 42) puts(""); /* keeps the sums */
    }
    printf("G = %7zu bytes: one stream %5.1f GB/s, two streams %5.1f GB/s (%.2f)\n", G, gbs[0], gbs[1], gbs[1] / gbs[0]);
  }
  free(buf);
  return 0;
}
