/* Test driver for the kernel's NEON build under qemu-aarch64 (tests/test_cpu_kernel.py).
   usage: driver TYPE ROWS K ROW_BYTES DIR  -- reads DIR/w.bin (ROWS x ROW_BYTES) and DIR/x.bin
   (17 x K float32); writes DIR/deq.bin (the dequantized rows) and DIR/{all,one}{1,2}.bin (the
   17 x ROWS matmul: all rows in one call / each row alone, with 1 or 2 threads), and where the
   type has an interleaved layout, DIR/x8{all,one}{1,2}.bin: the same through it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../specdec_core/cpu/kernels/sdcpu.h"

static void* slurp(const char* dir, const char* name, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  void* p = malloc(n);
  if (!f || fread(p, 1, n, f) != n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
  fclose(f);
  return p;
}

static void spill(const char* dir, const char* name, const void* p, size_t n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(p, 1, n, f) != n) { fprintf(stderr, "cannot write %s\n", path); exit(2); }
  fclose(f);
}

int main(int argc, char** argv) {
  if (argc != 6) return 2;
  const int type = atoi(argv[1]), rows = atoi(argv[2]), K = atoi(argv[3]), rb = atoi(argv[4]), M = 17;
  const char* dir = argv[5];
  const uint8_t* w = slurp(dir, "w.bin", (size_t)rows * rb);
  const float* x = slurp(dir, "x.bin", sizeof(float) * M * K);
  float* deq = malloc(sizeof(float) * rows * K);
  sd_dequantize(type, w, rb, 0, NULL, rows, K, deq);
  spill(dir, "deq.bin", deq, sizeof(float) * rows * K);
  float* y = malloc(sizeof(float) * M * rows);
  for (int threads = 1; threads <= 2; threads++) {
    char name[16];
    if (sd_matmul(x, M, K, type, w, rows, rb, 0, NULL, y, rows, threads)) return 3;
    snprintf(name, sizeof name, "all%d.bin", threads);
    spill(dir, name, y, sizeof(float) * M * rows);
    for (int m = 0; m < M; m++)
      if (sd_matmul(x + (size_t)m * K, 1, K, type, w, rows, rb, 0, NULL, y + (size_t)m * rows, rows, threads)) return 3;
    snprintf(name, sizeof name, "one%d.bin", threads);
    spill(dir, name, y, sizeof(float) * M * rows);
  }
  if (sd_x8_supported(type) && rows % 8 == 0) { /* the same through the interleaved layout */
    uint8_t* x8 = malloc((size_t)rows * rb);
    if (sd_repack(type, w, rb, rows, K, x8, 1, 2)) return 4;
    for (int threads = 1; threads <= 2; threads++) {
      char name[16];
      if (sd_matmul(x, M, K, type, x8, rows, rb, 1, NULL, y, rows, threads)) return 3;
      snprintf(name, sizeof name, "x8all%d.bin", threads);
      spill(dir, name, y, sizeof(float) * M * rows);
      for (int m = 0; m < M; m++)
        if (sd_matmul(x + (size_t)m * K, 1, K, type, x8, rows, rb, 1, NULL, y + (size_t)m * rows, rows, threads)) return 3;
      snprintf(name, sizeof name, "x8one%d.bin", threads);
      spill(dir, name, y, sizeof(float) * M * rows);
    }
  }
#if defined(__ARM_NEON)
  printf("neon=1 x8=%d\n", sd_x8_native());
#else
  printf("neon=0\n");
#endif
  return 0;
}
