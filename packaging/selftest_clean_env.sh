#!/usr/bin/env bash
# Run a built bundle's `--self-test` as on a machine with no Python packages installed.
#
#   bash packaging/selftest_clean_env.sh [EXE] [--fresh-cache]
#
#   EXE            the built executable (default: packaging/dist/specdec-chat/specdec-chat)
#   --fresh-cache  use an empty model cache (SPECDEC_CACHE_DIR in a temp dir): the first-run path,
#                  assembling the embedded pair from the bundled parts and converting it
#                  (minutes on CPU, ~9 GB written); without it the user's cache is used as is
#                  ($SPECDEC_CACHE_DIR, when set, is passed through).
#
# Clean environment: `env -i` (HOME, PATH=/usr/bin:/bin, QT_QPA_PLATFORM=offscreen only), and,
# where a private mount namespace is allowed (root), the project's .venv, its source folders
# and every system Python library folder are hidden behind empty tmpfs mounts, so the bundle
# cannot reach into any site-packages even by accident.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
EXE="$HERE/dist/specdec-chat/specdec-chat"
CACHE_ENV=()
[[ -n "${SPECDEC_CACHE_DIR:-}" ]] && CACHE_ENV=("SPECDEC_CACHE_DIR=$SPECDEC_CACHE_DIR")  # passed through
for arg in "$@"; do
  case "$arg" in
    --fresh-cache) FRESH="$(mktemp -d /tmp/specdec-fresh-cache.XXXXXX)"; CACHE_ENV=("SPECDEC_CACHE_DIR=$FRESH") ;;
    *) EXE="$(readlink -f "$arg")" ;;
  esac
done
[[ -x "$EXE" ]] || { echo "no executable at $EXE" >&2; exit 1; }

HIDE=()
for d in "$ROOT/.venv" "$ROOT/app" "$ROOT/specdec_core" /usr/lib/python3* /usr/local/lib/python3* \
         "$HOME/.local/lib"; do
  [[ -d "$d" ]] && HIDE+=("$d")
done

RUN=(env -i "HOME=$HOME" PATH=/usr/bin:/bin QT_QPA_PLATFORM=offscreen "${CACHE_ENV[@]}" "$EXE" --self-test)
start=$(date +%s)
set +e
if [[ $(id -u) == 0 ]] && unshare -m --propagation private true 2>/dev/null; then
  echo "clean env: env -i; hidden (tmpfs): ${HIDE[*]}" >&2
  unshare -m --propagation private bash -c '
    for d in "${@:2:$1}"; do mount -t tmpfs -o ro,size=1k none "$d" || exit 97; done
    shift $(( $1 + 1 )); exec "$@"' _ "${#HIDE[@]}" "${HIDE[@]}" "${RUN[@]}"
else
  echo "clean env: env -i only (no private mount namespace here)" >&2
  "${RUN[@]}"
fi
rc=$?
set -e
echo "self-test exit code $rc after $(( $(date +%s) - start )) s" >&2
[[ -n "${FRESH:-}" ]] && rm -rf "$FRESH"
exit $rc
