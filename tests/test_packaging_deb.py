"""The Linux package and the bundle's two commands, without a PyInstaller build: the .deb's tree
is staged from a fake bundle folder (packaging/deb.py, what build_linux.sh runs on the real
one) and packed with dpkg-deb where it exists; Depends come from real system ELF files; the
maintainer scripts run against recording stand-ins of the cache tools; the launcher started
through a `specdec` link runs the command line.

The real thing (minutes, GBs): bash packaging/build_linux.sh, then apt install the .deb
(packaging/README.md, "The .deb").
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "packaging"
HAS_DPKG = all(shutil.which(t) for t in ("dpkg-deb", "dpkg", "readelf"))
needs_dpkg = pytest.mark.skipif(not HAS_DPKG, reason="dpkg-deb, dpkg and readelf: Debian/Ubuntu only")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"specdec_{name}", PKG / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


deb = _load("deb")


def _version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


@pytest.fixture
def fake_bundle(tmp_path) -> Path:
    return _fake_bundle_at(tmp_path / "dist" / "specdec-chat")


def _fake_bundle_at(bundle: Path) -> Path:
    """A bundle folder shaped as build_linux.sh leaves it: the executable, its `specdec` link,
    an _internal/ with a library and a data file in a subfolder."""
    (bundle / "_internal" / "specdec_assets").mkdir(parents=True)
    (bundle / "specdec-chat").write_bytes(b"#!/bin/sh\necho fake\n")
    os.chmod(bundle / "specdec-chat", 0o700)  # a tight umask at build time: the package fixes modes
    (bundle / "specdec").symlink_to("specdec-chat")
    (bundle / "_internal" / "libfake.so.1").write_bytes(b"\x7fELF-not-really")
    (bundle / "_internal" / "specdec_assets" / "palette.json").write_text("{}")
    return bundle


def _tree(root: Path) -> dict[str, str]:
    """{relative path: 'dir' | 'link -> target' | 'file <mode>'} of a staged tree."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = f"link -> {os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = f"file {oct(path.stat().st_mode & 0o777)}"
    return out


def _stage(fake_bundle, tmp_path, version="9.8.7"):
    return deb.stage(fake_bundle, tmp_path / "root", version, "amd64", ["libc6 (>= 2.36)", "libegl1"],
                     maintainer="Test <test@example.org>")


def test_staged_tree_is_the_bundle_under_opt_with_commands_menu_entry_and_icons(fake_bundle, tmp_path):
    root = _stage(fake_bundle, tmp_path)
    tree = _tree(root)
    assert tree["opt/specdec-chat/specdec-chat"] == "file 0o755"
    assert tree["opt/specdec-chat/specdec"] == "link -> specdec-chat"
    assert tree["opt/specdec-chat/_internal/specdec_assets/palette.json"] == "file 0o644"
    assert tree["usr/bin/specdec-chat"] == "link -> /opt/specdec-chat/specdec-chat"
    assert tree["usr/bin/specdec"] == "link -> /opt/specdec-chat/specdec"
    # the bundle's files, byte for byte, and nothing of the package outside these places
    for path in fake_bundle.rglob("*"):
        rel = path.relative_to(fake_bundle).as_posix()
        staged = root / "opt/specdec-chat" / rel
        assert path.is_symlink() == staged.is_symlink(), rel
        if path.is_file() and not path.is_symlink():
            assert staged.read_bytes() == path.read_bytes(), rel
    def children(folder):
        return {p for p in tree if p.rsplit("/", 1)[0] == folder and "/" in p}

    assert {p for p in tree if "/" not in p} == {"opt", "usr", "DEBIAN"}
    assert children("opt") == {"opt/specdec-chat"} and children("usr") == {"usr/bin", "usr/share"}
    assert children("usr/bin") == {"usr/bin/specdec", "usr/bin/specdec-chat"}
    assert children("DEBIAN") == {"DEBIAN/control", "DEBIAN/postinst", "DEBIAN/postrm"}
    assert {p for p in tree if p.startswith("usr/share/") and tree[p] != "dir"} == {
        "usr/share/applications/specdec-chat.desktop",
        "usr/share/icons/hicolor/256x256/apps/specdec-chat.png",
        "usr/share/icons/hicolor/scalable/apps/specdec-chat.svg",
        "usr/share/doc/specdec-chat/copyright"}
    # the icon folder is named after the PNG's real size, the svg is the project's
    assert deb.png_size(root / "usr/share/icons/hicolor/256x256/apps/specdec-chat.png") == (256, 256)
    assert (root / "usr/share/icons/hicolor/scalable/apps/specdec-chat.svg").read_bytes() == \
        (ROOT / "assets/icon.svg").read_bytes()
    assert all(mode in ("dir", "file 0o644", "file 0o755") or mode.startswith("link")
               for mode in tree.values())


def test_menu_entry_runs_the_command_on_path_with_the_installed_icon(fake_bundle, tmp_path):
    root = _stage(fake_bundle, tmp_path)
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(root / "usr/share/applications/specdec-chat.desktop", encoding="utf-8")
    d = entry["Desktop Entry"]
    assert d["Type"] == "Application" and d["Name"] == "SpecDec Chat" and d["Terminal"] == "false"
    assert d["Exec"] == d["TryExec"] == "specdec-chat" and (root / "usr/bin" / d["Exec"]).is_symlink()
    assert list((root / "usr/share/icons/hicolor").glob(f"*/apps/{d['Icon']}.*"))
    assert d["Categories"].endswith(";")
    if shutil.which("desktop-file-validate"):
        r = subprocess.run(["desktop-file-validate", str(root / "usr/share/applications/specdec-chat.desktop")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


def test_control_file_names_the_package_its_size_and_depends(fake_bundle, tmp_path):
    root = _stage(fake_bundle, tmp_path, version="9.8.7")
    fields = dict(line.split(": ", 1) for line in (root / "DEBIAN/control").read_text().splitlines()
                  if not line.startswith(" "))
    assert fields["Package"] == "specdec-chat" and fields["Version"] == "9.8.7"
    assert fields["Architecture"] == "amd64" and fields["Maintainer"] == "Test <test@example.org>"
    assert fields["Depends"] == "libc6 (>= 2.36), libegl1"
    payload = sum(p.stat().st_size for p in (root / "opt").rglob("*") if p.is_file() and not p.is_symlink())
    assert payload // 1024 <= int(fields["Installed-Size"]) <= payload // 1024 + 64


def test_stage_refuses_a_folder_that_is_no_bundle(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a built bundle"):
        deb.stage(tmp_path / "empty", tmp_path / "root", "1.0", "amd64", [])


def _fake_tool(folder: Path, name: str, log: Path) -> None:
    (folder / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n')
    os.chmod(folder / name, 0o755)


@pytest.mark.parametrize("script,action", [("postinst", "configure"), ("postrm", "remove"), ("postrm", "purge")])
def test_maintainer_scripts_refresh_caches_when_the_tools_exist_and_pass_without(fake_bundle, tmp_path,
                                                                                 script, action):
    root = _stage(fake_bundle, tmp_path)
    path = root / "DEBIAN" / script
    assert path.stat().st_mode & 0o777 == 0o755
    tools, log = tmp_path / "tools", tmp_path / "calls.log"
    tools.mkdir()
    for name in ("update-desktop-database", "gtk-update-icon-cache"):
        _fake_tool(tools, name, log)
    env = {"PATH": f"{tools}:/usr/bin:/bin"}
    r = subprocess.run(["sh", str(path), action], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    calls = log.read_text().splitlines()
    assert calls[0] == "update-desktop-database -q /usr/share/applications"
    if Path("/usr/share/icons/hicolor").is_dir():
        assert calls[1] == "gtk-update-icon-cache -q -t -f /usr/share/icons/hicolor"
    # other actions (upgrade, abort-*) leave the caches alone; no tools at all is no error
    log.unlink()
    assert subprocess.run(["sh", str(path), "upgrade"], env=env).returncode == 0 and not log.exists()
    empty = tmp_path / "no-tools"
    empty.mkdir()
    r = subprocess.run(["/bin/sh", str(path), action], env={"PATH": str(empty)}, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _system_library(soname: str) -> Path | None:
    """Where this system has a library, for the package's architecture (`ldconfig -p`)."""
    found, _missing = deb.system_paths({soname}, deb.deb_arch())
    return Path(found[soname]) if soname in found else None


@needs_dpkg
def test_depends_are_the_packages_of_the_system_libraries_the_bundle_does_not_carry(tmp_path):
    """Real ELF files in a fake bundle: libxcb needs libXau, libXdmcp and libc; the bundle
    carries libXau, so Depends names libc6 (versioned) and libXdmcp's package, not libXau's."""
    xcb, xau = _system_library("libxcb.so.1"), _system_library("libXau.so.6")
    if not (xcb and xau):
        pytest.skip("libxcb1 and libxau6 are not installed here")
    bundle = tmp_path / "bundle"
    (bundle / "_internal").mkdir(parents=True)
    shutil.copy(xcb, bundle / "_internal" / "libxcb.so.1")
    shutil.copy(xau, bundle / "_internal" / "libXau.so.6")
    (bundle / "specdec-chat").write_text("#!/bin/sh\n")
    arch = deb.deb_arch()
    deps, recommends, warnings = deb.depends(bundle, arch)
    assert deps[0].startswith("libc6 (>= 2.") and not warnings and not recommends
    assert deps[1:] == ["libxdmcp6"], deps


@needs_dpkg
def test_optional_plugin_libraries_are_recommended_and_unknown_ones_warned(tmp_path, monkeypatch):
    """What only Qt's GTK theme and Wayland plugins need goes to Recommends whether or not the
    build machine has it; a library nobody here provides is said, not guessed."""
    needed = {"libc.so.6", "libgtk-3.so.0", "libgdk-3.so.0", "libwayland-egl.so.1", "libcarried.so.2",
              "libnowhere-at-all.so.9"}
    monkeypatch.setattr(deb, "needed_libraries", lambda bundle: (needed, {"libcarried.so.2"}))
    deps, recommends, warnings = deb.depends(tmp_path, deb.deb_arch())
    assert deps == [f"libc6 (>= {deb.glibc_version()})"]
    assert recommends == ["libgtk-3-0", "libwayland-egl1"]
    assert warnings == ["no library on this system for libnowhere-at-all.so.9: not in Depends"]
    root = deb.stage(_fake_bundle_at(tmp_path / "b"), tmp_path / "root", "1.0", "amd64", deps, recommends=recommends)
    assert "Recommends: fonts-dejavu-core, libgtk-3-0, libwayland-egl1\n" in (root / "DEBIAN/control").read_text()


@needs_dpkg
def test_dpkg_deb_packs_the_staged_tree_into_an_installable_layout(fake_bundle, tmp_path):
    root = _stage(fake_bundle, tmp_path, version="9.8.7")
    out = tmp_path / "specdec-chat_9.8.7_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)], check=True,
                   capture_output=True)
    info = subprocess.run(["dpkg-deb", "-f", str(out), "Package", "Version", "Depends"], capture_output=True,
                          text=True, check=True).stdout
    assert "Package: specdec-chat" in info and "Version: 9.8.7" in info
    listing = subprocess.run(["dpkg-deb", "--contents", str(out)], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    owners = {line.split()[1] for line in listing}
    assert owners == {"root/root"}
    names = {line.split()[5] for line in listing}
    assert {"./opt/specdec-chat/specdec-chat", "./usr/share/applications/specdec-chat.desktop",
            "./usr/bin/specdec", "./usr/bin/specdec-chat"} <= names
    assert any(line.endswith("./usr/bin/specdec -> /opt/specdec-chat/specdec") for line in listing)


@needs_dpkg
def test_deb_py_build_makes_the_named_package_and_cleans_its_staging(fake_bundle, tmp_path):
    r = subprocess.run([sys.executable, str(PKG / "deb.py"), "build", str(fake_bundle), str(tmp_path),
                        "--version", "1.2.3", "--workdir", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = Path(r.stdout.strip().splitlines()[-1])
    assert out == tmp_path / f"specdec-chat_1.2.3_{deb.deb_arch()}.deb" and out.is_file()
    assert not (tmp_path / "work" / "deb-root").exists()
    # the fake bundle's only ELF-looking file is no real ELF: Depends is libc6 alone
    depends = subprocess.run(["dpkg-deb", "-f", str(out), "Depends"], capture_output=True, text=True).stdout
    assert depends.startswith("libc6 (>= ")
    # a wrong folder: one line, and the work folder (a real build's staging) is left as it was
    staging = tmp_path / "work" / "deb-root" / "kept"
    staging.mkdir(parents=True)
    r = subprocess.run([sys.executable, str(PKG / "deb.py"), "build", str(tmp_path / "nothing"), str(tmp_path),
                        "--workdir", str(tmp_path / "work")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.startswith("deb.py: error: ") and "Traceback" not in r.stderr
    assert staging.is_dir()


# ---- the launcher: one executable, two commands

def test_launcher_picks_the_entry_point_by_the_name_it_was_started_as():
    launcher = _load("launcher")
    with open(ROOT / "pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert launcher.ENTRY_POINTS == scripts
    assert launcher.entry_point_for("/usr/bin/specdec") == scripts["specdec"]
    assert launcher.entry_point_for("specdec.exe") == scripts["specdec"]
    for name in ("/opt/specdec-chat/specdec-chat", "specdec-chat.exe", "SpecDec Chat", "", "specdecx"):
        assert launcher.entry_point_for(name) == scripts["specdec-chat"], name


@pytest.mark.parametrize("name,args,expect", [
    ("specdec", ["--version"], "specdec {v}"),
    ("specdec-chat", ["--version"], "specdec-chat {v}"),
    ("specdec", ["serve", "--help"], "usage: specdec serve"),
])
def test_launcher_started_through_a_link_runs_that_command(tmp_path, name, args, expect):
    """As in the bundle: a link named `specdec` to the one entry script runs the command line."""
    (tmp_path / name).symlink_to(PKG / "launcher.py")
    r = subprocess.run([sys.executable, str(tmp_path / name), *args], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(expect.format(v=_version())), r.stdout


def test_build_script_makes_the_cli_link_and_the_deb(tmp_path):
    """build_linux.sh: the `specdec` link beside the executable, the menu entry from deb.py, and
    deb.py's build after the bundle (its options parse; bash -n)."""
    text = (PKG / "build_linux.sh").read_text()
    assert 'ln -sfn "$NAME" "$DIST/$NAME/specdec"' in text
    assert '"$HERE/deb.py" desktop-entry' in text and '"$HERE/deb.py" build' in text
    assert subprocess.run(["bash", "-n", str(PKG / "build_linux.sh")]).returncode == 0
    r = subprocess.run(["bash", str(PKG / "build_linux.sh"), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--no-deb" in r.stdout and "--no-tarball" in r.stdout
    r = subprocess.run(["bash", str(PKG / "build_linux.sh"), "--bogus"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown option" in r.stderr
