#!/usr/bin/env bash
# The instruction-set flags for a llama.cpp CPU build on this machine, for cmake.
# GGML_NATIVE=ON (-march=native) everywhere but on x86 CPUs that report AMX: some virtual machines
# report it and do not let a process use it, and ggml's AMX matmul then dies with SIGILL on its
# first `tilezero` (seen on the project's Intel Xeon VMs with the embedded pair's Q4_K target).
# There the build names this CPU's other extensions one by one, so it runs what -march=native
# would, AMX aside.
set -euo pipefail
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { [[ " $flags " == *" $1 "* ]]; }
if [[ "$(uname -m)" != x86_64 ]] || ! has amx_tile; then
  echo "-DGGML_NATIVE=ON"
  exit 0
fi
out=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
for pair in avx:GGML_AVX avx2:GGML_AVX2 bmi2:GGML_BMI2 fma:GGML_FMA f16c:GGML_F16C avx_vnni:GGML_AVX_VNNI \
            avx512f:GGML_AVX512 avx512vbmi:GGML_AVX512_VBMI avx512_vnni:GGML_AVX512_VNNI avx512_bf16:GGML_AVX512_BF16; do
  if has "${pair%%:*}"; then out+=("-D${pair#*:}=ON"); else out+=("-D${pair#*:}=OFF"); fi
done
echo "${out[*]}"
