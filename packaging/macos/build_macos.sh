#!/usr/bin/env bash
# Build "SpecDec Chat.app" and a .dmg on macOS (run on the Mac architecture you target).
#   bash packaging/macos/build_macos.sh [--no-models]
# Needs: Python 3.11+, the project with [embedded] and pyinstaller in .venv (see README.md).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"
BUNDLE_MODELS=1
[[ "${1:-}" == "--no-models" ]] && BUNDLE_MODELS=0
VERSION="$("$PYTHON" -c "import tomllib; print(tomllib.load(open('pyproject.toml','rb'))['project']['version'])")"
DIST="$ROOT/packaging/dist"
SPECDEC_BUNDLE_MODELS=$BUNDLE_MODELS "$PYTHON" -m PyInstaller --noconfirm --clean \
  --distpath "$DIST" --workpath "$ROOT/packaging/build" packaging/specdec-chat.spec
APP="$DIST/SpecDec Chat.app"
[[ -d "$APP" ]] || { echo "no $APP" >&2; exit 1; }
# Ad-hoc signature so Gatekeeper on Apple silicon runs it locally; use a Developer ID + notarytool to publish.
codesign --force --deep --sign - "$APP"
STAGE="$(mktemp -d)"
cp -R "$APP" "$STAGE/"
ln -s /Applications "$STAGE/Applications"
DMG="$DIST/specdec-chat-$VERSION-macos-$(uname -m).dmg"
rm -f "$DMG"
hdiutil create -volname "SpecDec Chat $VERSION" -srcfolder "$STAGE" -ov -format UDZO "$DMG" >&2
rm -rf "$STAGE"
"$APP/Contents/MacOS/specdec-chat" --version
echo "$APP/Contents/MacOS/specdec-chat"
