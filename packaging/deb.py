"""The Debian package of SpecDec Chat, from a built bundle folder (plain Python + dpkg-deb).

    python packaging/deb.py build BUNDLE OUTDIR --version X.Y.Z [--compression gzip|xz|zstd|none]
    python packaging/deb.py desktop-entry          # the .desktop file, on stdout

Layout of the package (`stage()` builds it in a folder; dpkg-deb packs that folder):

    /opt/specdec-chat/                         the PyInstaller bundle, as built
    /usr/bin/specdec-chat -> /opt/specdec-chat/specdec-chat     the window
    /usr/bin/specdec      -> /opt/specdec-chat/specdec          the command line (serve, ...)
    /usr/share/applications/specdec-chat.desktop                the menu entry
    /usr/share/icons/hicolor/256x256/apps/specdec-chat.png      its icon (and scalable/ .svg)
    /usr/share/doc/specdec-chat/copyright
    DEBIAN/control, postinst, postrm

Everything is a file of the package, so `apt remove` takes it all away; the app writes only
under the user's home (chats, settings, model cache), which Debian leaves to the user.

Depends: the system libraries the bundle's ELF files link and the bundle does not carry
(`readelf -d` NEEDED entries), each mapped to its Debian package by `dpkg -S` -- the X11, xcb,
EGL/GL, fontconfig, glib and dbus client libraries Qt needs -- with libc6 at least the build
machine's glibc. tests/test_packaging.py builds the staging tree from a fake bundle.
Plain Python, no PyInstaller: build_linux.sh runs it with the build's Python.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

NAME = "specdec-chat"
CLI_NAME = "specdec"
PREFIX = f"/opt/{NAME}"
ROOT = Path(__file__).resolve().parent.parent
ICON_PNG = ROOT / "assets" / "icon.png"
ICON_SVG = ROOT / "assets" / "icon.svg"
DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}
LDCONFIG_ARCH = {"amd64": "x86-64", "arm64": "AArch64"}  # the tag `ldconfig -p` gives 64-bit libraries
# Maintainer scripts: desktop-file-utils and hicolor-icon-theme refresh their caches through
# dpkg triggers on Debian; these calls cover systems where the tools exist without the triggers,
# and do nothing where the tools are absent.
REFRESH_CACHES = """\
    if command -v update-desktop-database >/dev/null 2>&1; then
        update-desktop-database -q /usr/share/applications || true
    fi
    if command -v gtk-update-icon-cache >/dev/null 2>&1 && [ -d /usr/share/icons/hicolor ]; then
        gtk-update-icon-cache -q -t -f /usr/share/icons/hicolor || true
    fi
"""
POSTINST = f"""#!/bin/sh
set -e
case "$1" in
  configure)
{REFRESH_CACHES}    ;;
esac
exit 0
"""
POSTRM = f"""#!/bin/sh
set -e
case "$1" in
  remove|purge)
{REFRESH_CACHES}    ;;
esac
exit 0
"""


def desktop_entry() -> str:
    """The menu entry (freedesktop Desktop Entry): the command on PATH, the icon by theme name."""
    return ("[Desktop Entry]\nType=Application\nName=SpecDec Chat\n"
            "GenericName=Local LLM chat\nComment=Chat with exact speculative decoding, live\n"
            f"Exec={NAME}\nTryExec={NAME}\nIcon={NAME}\nCategories=Development;Utility;\n"
            "Keywords=LLM;chat;speculative decoding;AI;\nTerminal=false\n")


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR (the icon folder is named after its size)."""
    head = Path(path).read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")


def deb_arch(machine: str | None = None) -> str:
    machine = machine or platform.machine()
    return DEB_ARCH.get(machine, machine)


def project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


# ---- Depends: what the bundle's ELF files need from the system

def tool(name: str) -> str | None:
    """A program's path: on PATH, or in /sbin (ldconfig, for a user whose PATH lacks it)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def needed_libraries(bundle: Path) -> tuple[set[str], set[str]]:
    """(every NEEDED soname of the bundle's ELF files, the file names the bundle carries)."""
    needed, carried = set(), set()
    for folder, _dirs, names in os.walk(bundle):
        for n in names:
            path = Path(folder, n)
            carried.add(n)
            if path.is_symlink() or not is_elf(path):
                continue
            out = subprocess.run(["readelf", "-d", "-W", str(path)], capture_output=True, text=True).stdout
            needed.update(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out))
    return needed, carried


def system_paths(sonames: set[str], arch: str) -> tuple[dict[str, str], set[str]]:
    """({soname: its path on this system}, sonames this system lacks), by `ldconfig -p` for the
    package's architecture."""
    tag = LDCONFIG_ARCH.get(arch, "")
    found: dict[str, str] = {}
    for line in subprocess.run([tool("ldconfig"), "-p"], capture_output=True, text=True).stdout.splitlines():
        m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)", line)
        if m and m.group(1) in sonames and m.group(1) not in found and (not tag or tag in m.group(2)):
            found[m.group(1)] = m.group(3)
    return found, sonames - set(found)


def owning_packages(paths: list[str]) -> dict[str, str]:
    """{path: the Debian package that installed it} (`dpkg -S`, on the path and on its real path:
    merged /usr lists a library under /lib or /usr/lib)."""
    owners: dict[str, str] = {}
    for path in paths:
        for candidate in dict.fromkeys([path, os.path.realpath(path)]):
            r = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
            line = next((ln for ln in r.stdout.splitlines() if not ln.startswith("diversion ")), "")
            if r.returncode == 0 and ": " in line:
                owners[path] = line.split(": ", 1)[0].split(",")[0].split(":")[0].strip()
                break
    return owners


# Libraries only Qt plugins need that Qt loads when the session has them -- the GTK platform
# theme on a GTK desktop, the Wayland platform on a Wayland session (xcb otherwise) -- with the
# package each comes in: Recommends, never Depends (a machine without them runs the app on X11).
OPTIONAL_LIBRARIES = {
    "libgtk-3.so.0": "libgtk-3-0", "libgdk-3.so.0": "libgtk-3-0",
    "libwayland-client.so.0": "libwayland-client0", "libwayland-cursor.so.0": "libwayland-cursor0",
    "libwayland-egl.so.1": "libwayland-egl1",
}


def glibc_version() -> str:
    return platform.libc_ver()[1] or os.confstr("CS_GNU_LIBC_VERSION").split()[-1]


def depends(bundle: Path, arch: str) -> tuple[list[str], list[str], list[str]]:
    """(the Depends entries of a bundle, its Recommends, warnings: libraries no package here
    provides)."""
    needed, carried = needed_libraries(Path(bundle))
    system = needed - carried
    recommends = sorted({OPTIONAL_LIBRARIES[s] for s in system & OPTIONAL_LIBRARIES.keys()})
    found, missing = system_paths(system - OPTIONAL_LIBRARIES.keys(), arch)
    owners = owning_packages(sorted(found.values()))
    packages = {owners[p] for p in found.values() if p in owners}
    unowned = sorted(s for s, p in found.items() if p not in owners)
    warnings = [f"no library on this system for {s}: not in Depends" for s in sorted(missing)]
    warnings += [f"{s} ({found[s]}) belongs to no Debian package: not in Depends" for s in unowned]
    packages.discard("libc6")
    return [f"libc6 (>= {glibc_version()})"] + sorted(packages), recommends, warnings


# ---- the package's tree

def control(version: str, arch: str, deps: list[str], installed_kib: int, maintainer: str,
            recommends: list[str] = ()) -> str:
    proj = project()
    return (f"Package: {NAME}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: {maintainer}\n"
            f"Installed-Size: {installed_kib}\nDepends: {', '.join(deps)}\n"
            f"Recommends: {', '.join(['fonts-dejavu-core', *recommends])}\nSection: utils\nPriority: optional\n"
            f"Description: {proj['description']}\n"
            " SpecDec Chat runs a target language model with a small draft model and shows,\n"
            " token by token, what the draft proposed and the target accepted. The output is\n"
            " exactly what the target alone would produce. Commands: specdec-chat (the\n"
            " window) and specdec (generate, models, bench, race, serve: an OpenAI-compatible\n"
            " server). Self-contained: its own Python, PySide6 and torch under /opt/specdec-chat.\n")


def copy_bundle(bundle: Path, dest: Path) -> None:
    """The bundle into the staging tree: hard links where the file system allows (the bundle is
    GBs), copies otherwise; symlinks (the `specdec` command) as symlinks."""
    def link_or_copy(src, dst):
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)
    shutil.copytree(bundle, dest, symlinks=True, copy_function=link_or_copy)


def normalize_modes(root: Path) -> None:
    """0755 folders and executables, 0644 other files: what a package installs, whatever the
    build's umask was."""
    for folder, dirs, names in os.walk(root):
        for d in dirs:
            if not Path(folder, d).is_symlink():
                os.chmod(Path(folder, d), 0o755)
        for n in names:
            p = Path(folder, n)
            if not p.is_symlink():
                os.chmod(p, 0o755 if p.stat().st_mode & 0o111 else 0o644)
    os.chmod(root, 0o755)


def installed_size_kib(root: Path) -> int:
    """dpkg's Installed-Size: KiB, each file rounded up, one per folder or link."""
    total = 0
    for folder, dirs, names in os.walk(root):
        if "DEBIAN" in Path(folder).relative_to(root).parts[:1]:
            continue
        total += len(dirs)
        for n in names:
            p = Path(folder, n)
            total += 1 if p.is_symlink() else -(-p.stat().st_size // 1024)
    return total


def check_bundle(bundle: Path) -> None:
    if not (Path(bundle) / NAME).is_file():
        raise FileNotFoundError(f"{bundle}: no {NAME} executable: not a built bundle")


def stage(bundle: Path, root: Path, version: str, arch: str, deps: list[str],
          maintainer: str = "SpecDec Chat maintainers <specdec-chat@localhost>", recommends: list[str] = ()) -> Path:
    """The package's file tree under `root` (made; must not exist), from a bundle folder that
    holds the executable `specdec-chat` (and its `specdec` symlink). Returns `root`."""
    bundle, root = Path(bundle), Path(root)
    check_bundle(bundle)
    root.mkdir(parents=True)
    copy_bundle(bundle, root / PREFIX.lstrip("/"))
    cli = root / PREFIX.lstrip("/") / CLI_NAME
    if not cli.is_symlink() and not cli.exists():
        cli.symlink_to(NAME)  # a bundle from before build_linux.sh made the link
    (root / "usr/bin").mkdir(parents=True)
    for command in (NAME, CLI_NAME):
        (root / "usr/bin" / command).symlink_to(f"{PREFIX}/{command}")
    apps = root / "usr/share/applications"
    apps.mkdir(parents=True)
    (apps / f"{NAME}.desktop").write_text(desktop_entry(), encoding="utf-8")
    width, height = png_size(ICON_PNG)
    for folder, src in ((f"{width}x{height}", ICON_PNG), ("scalable", ICON_SVG)):
        icons = root / "usr/share/icons/hicolor" / folder / "apps"
        icons.mkdir(parents=True)
        shutil.copyfile(src, icons / f"{NAME}{src.suffix}")
    doc = root / "usr/share/doc" / NAME
    doc.mkdir(parents=True)
    (doc / "copyright").write_text(f"{NAME}: {project()['license']['text']}.\nThe bundle under {PREFIX} "
                                   "carries Python, PySide6 (LGPLv3), torch and other libraries under "
                                   "their own licenses.\n", encoding="utf-8")
    normalize_modes(root)
    debian = root / "DEBIAN"
    debian.mkdir()
    for script, text in (("postinst", POSTINST), ("postrm", POSTRM)):
        (debian / script).write_text(text, encoding="utf-8")
        os.chmod(debian / script, 0o755)
    (debian / "control").write_text(control(version, arch, deps, installed_size_kib(root), maintainer, recommends),
                                    encoding="utf-8")
    os.chmod(debian, 0o755)
    return root


def build(bundle: Path, outdir: Path, version: str, compression: str, workdir: Path) -> Path:
    """stage() + dpkg-deb: the .deb in outdir (replaced if there), named as Debian names it."""
    check_bundle(bundle)  # before anything in workdir is replaced
    arch = deb_arch()
    deps, recommends, warnings = depends(bundle, arch)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    root = Path(workdir) / "deb-root"
    if root.exists():
        shutil.rmtree(root)
    stage(bundle, root, version, arch, deps, os.environ.get("DEB_MAINTAINER") or
          "SpecDec Chat maintainers <specdec-chat@localhost>", recommends)
    out = Path(outdir) / f"{NAME}_{version}_{arch}.deb"
    out.unlink(missing_ok=True)
    subprocess.run(["dpkg-deb", "--root-owner-group", f"-Z{compression}", "--build", str(root), str(out)],
                   check=True, stdout=sys.stderr)
    shutil.rmtree(root)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="deb.py", description="Debian package of a built SpecDec Chat bundle")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="stage the bundle and pack it with dpkg-deb; prints the .deb's path")
    b.add_argument("bundle", type=Path)
    b.add_argument("outdir", type=Path)
    b.add_argument("--version", default=project()["version"])
    b.add_argument("--compression", default="gzip", choices=("gzip", "xz", "zstd", "none"))
    b.add_argument("--workdir", type=Path, default=ROOT / "packaging" / "build")
    sub.add_parser("desktop-entry", help="print the .desktop file")
    args = p.parse_args(argv)
    if args.command == "desktop-entry":
        sys.stdout.write(desktop_entry())
        return 0
    for name in ("dpkg-deb", "dpkg", "readelf", "ldconfig"):
        if not tool(name):
            print(f"deb.py: error: {name} not found: a .deb is built on Debian or Ubuntu (binutils, dpkg)",
                  file=sys.stderr)
            return 2
    try:
        print(build(args.bundle, args.outdir, args.version, args.compression, args.workdir))
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        print(f"deb.py: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
