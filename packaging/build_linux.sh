#!/usr/bin/env bash
# Build the Linux bundle of SpecDec Chat: a self-contained folder, a .tar.gz and a .deb.
#
#   bash packaging/build_linux.sh [--no-models] [--no-tarball] [--no-deb] [--self-test]
#
#   --no-models   slim bundle without the embedded pair (the user puts it in models/, see README)
#   --no-tarball  no .tar.gz
#   --no-deb      no .deb (it needs dpkg-deb, readelf and ldconfig: Debian or Ubuntu)
#   --self-test   afterwards run the built executable's --self-test in a clean environment
#                 (no Python, no venv, offscreen)
#
# Environment: PYTHON (default: .venv/bin/python, else python3) -- an environment with the
# project, its [embedded] extra and pyinstaller installed. DEB_COMPRESSION (gzip, the default:
# every dpkg reads it; xz: smaller, minutes slower; zstd; none), DEB_MAINTAINER.
# Output: packaging/dist/specdec-chat/ (executable specdec-chat, and specdec: the command line),
# packaging/dist/specdec-chat-<version>-linux-<arch>.tar.gz, packaging/dist/specdec-chat_<version>_<debarch>.deb
# The LAST line printed is the path of the built executable.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
cd "$ROOT"

BUNDLE_MODELS=1
SELF_TEST=0
TARBALL_TOO=1
DEB_TOO=1
for arg in "$@"; do
  case "$arg" in
    --no-models) BUNDLE_MODELS=0 ;;
    --no-tarball) TARBALL_TOO=0 ;;
    --no-deb) DEB_TOO=0 ;;
    --self-test) SELF_TEST=1 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown option: $arg" >&2; exit 2 ;;
  esac
done

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c "import PyInstaller" 2>/dev/null; then
  # the `packaging` extra of pyproject.toml: install it rather than stop a fresh checkout
  echo "installing pyinstaller into $PYTHON (pip install -e '.[packaging]')" >&2
  "$PYTHON" -m pip install -q -e ".[packaging]" >&2
fi
VERSION="$("$PYTHON" -c "import tomllib; print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])")"
ARCH="$(uname -m)"
DIST="$HERE/dist"
NAME=specdec-chat
SUFFIX=""
[[ $BUNDLE_MODELS == 1 ]] || SUFFIX="-slim"
TARBALL="$DIST/$NAME-$VERSION-linux-$ARCH$SUFFIX.tar.gz"

start=$(date +%s)
SPECDEC_BUNDLE_MODELS=$BUNDLE_MODELS "$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath "$DIST" --workpath "$HERE/build" "$HERE/$NAME.spec" >&2
built=$(date +%s)

EXE="$DIST/$NAME/$NAME"
[[ -x "$EXE" ]] || { echo "build failed: $EXE missing" >&2; exit 1; }

# The command line: the same executable started as `specdec` (packaging/launcher.py picks the
# entry point by that name; the bootloader resolves the link to this folder).
ln -sfn "$NAME" "$DIST/$NAME/specdec"

# Desktop integration files beside the executable (used by a user install or an AppImage).
cp "$ROOT/assets/icon.png" "$DIST/$NAME/$NAME.png"
"$PYTHON" "$HERE/deb.py" desktop-entry > "$DIST/$NAME/$NAME.desktop"

packed=$built
if [[ $TARBALL_TOO == 1 ]]; then
  rm -f "$TARBALL"
  tar -C "$DIST" -czf "$TARBALL" "$NAME"
  packed=$(date +%s)
fi

debbed=$packed
if [[ $DEB_TOO == 1 ]]; then
  DEB="$("$PYTHON" "$HERE/deb.py" build "$DIST/$NAME" "$DIST" --version "$VERSION" \
         --compression "${DEB_COMPRESSION:-gzip}" --workdir "$HERE/build" | tail -n 1)"
  debbed=$(date +%s)
fi

{
  echo "version:        $VERSION (${SUFFIX:-full, embedded pair bundled})"
  echo "pyinstaller:    $((built - start)) s"
  echo "folder size:    $(du -sh "$DIST/$NAME" | cut -f1)  ($(du -sb "$DIST/$NAME" | cut -f1) bytes)"
  if [[ $TARBALL_TOO == 1 ]]; then
    echo "tar.gz:         $((packed - built)) s"
    echo "tar.gz size:    $(du -h "$TARBALL" | cut -f1)  ($(stat -c %s "$TARBALL") bytes)  $TARBALL"
  fi
  if [[ $DEB_TOO == 1 ]]; then
    echo "deb:            $((debbed - packed)) s (${DEB_COMPRESSION:-gzip})"
    echo "deb size:       $(du -h "$DEB" | cut -f1)  ($(stat -c %s "$DEB") bytes)  $DEB"
  fi
} | tee "$DIST/build-info.txt" >&2

# AppImage: only when appimagetool is already installed (it is not in Debian's or PyPI's
# registries, and this script downloads nothing).
if command -v appimagetool >/dev/null 2>&1; then
  APPDIR="$HERE/build/AppDir"
  rm -rf "$APPDIR" && mkdir -p "$APPDIR/usr/lib"
  cp -a "$DIST/$NAME" "$APPDIR/usr/lib/$NAME"
  cp "$DIST/$NAME/$NAME.desktop" "$DIST/$NAME/$NAME.png" "$APPDIR/"
  printf '#!/bin/sh\nexec "$(dirname "$(readlink -f "$0")")/usr/lib/%s/%s" "$@"\n' "$NAME" "$NAME" > "$APPDIR/AppRun"
  chmod +x "$APPDIR/AppRun"
  ARCH="$ARCH" appimagetool "$APPDIR" "$DIST/$NAME-$VERSION-$ARCH.AppImage" >&2
else
  echo "appimagetool not found: no AppImage (see packaging/README.md)" >&2
fi

if [[ $SELF_TEST == 1 ]]; then
  bash "$HERE/selftest_clean_env.sh" "$EXE" >&2
fi

echo "$EXE"
