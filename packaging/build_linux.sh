#!/usr/bin/env bash
# Build the Linux bundle of SpecDec Chat: a self-contained folder + a .tar.gz.
#
#   bash packaging/build_linux.sh [--no-models] [--self-test]
#
#   --no-models   slim bundle without the embedded pair (the user puts it in models/, see README)
#   --self-test   afterwards run the built executable's --self-test in a clean environment
#                 (no Python, no venv, offscreen)
#
# Environment: PYTHON (default: .venv/bin/python, else python3) -- an environment with the
# project, its [embedded] extra and pyinstaller installed.
# Output: packaging/dist/specdec-chat/ and packaging/dist/specdec-chat-<version>-linux-<arch>.tar.gz
# The LAST line printed is the path of the built executable.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
cd "$ROOT"

BUNDLE_MODELS=1
SELF_TEST=0
for arg in "$@"; do
  case "$arg" in
    --no-models) BUNDLE_MODELS=0 ;;
    --self-test) SELF_TEST=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
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

# Desktop integration files beside the executable (used by a user install or an AppImage).
cp "$ROOT/assets/icon.png" "$DIST/$NAME/$NAME.png"
cat > "$DIST/$NAME/$NAME.desktop" <<DESKTOP
[Desktop Entry]
Type=Application
Name=SpecDec Chat
Comment=Chat with exact speculative decoding, live
Exec=$NAME
Icon=$NAME
Categories=Development;Utility;
Terminal=false
DESKTOP

rm -f "$TARBALL"
tar -C "$DIST" -czf "$TARBALL" "$NAME"
packed=$(date +%s)

{
  echo "version:        $VERSION (${SUFFIX:-full, embedded pair bundled})"
  echo "pyinstaller:    $((built - start)) s"
  echo "tar.gz:         $((packed - built)) s"
  echo "folder size:    $(du -sh "$DIST/$NAME" | cut -f1)  ($(du -sb "$DIST/$NAME" | cut -f1) bytes)"
  echo "tar.gz size:    $(du -h "$TARBALL" | cut -f1)  ($(stat -c %s "$TARBALL") bytes)  $TARBALL"
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
