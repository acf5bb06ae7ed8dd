"""Packaging checks that need no PyInstaller build, by behaviour: the spec is run (with
PyInstaller's build steps recorded, not executed) and the bundle it describes is laid out and
imported; the launcher is run; the wheel is built, its file list checked, and the bench and
the app read their files from the installed wheel alone.

The full build + self-test of the bundle is a separate command (minutes, GBs):
    bash packaging/build_linux.sh --self-test
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "packaging"
SPEC = PKG / "specdec-chat.spec"
# the data files of assets/, which ship as the package specdec_assets (its __init__.py is a module)
ASSETS = sorted(p.name for p in (ROOT / "assets").iterdir() if p.is_file() and p.suffix != ".py")


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _setuptools() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def _bundle_data():
    """packaging/bundle_data.py, the spec's package-data collection, loaded as the spec loads it
    (by path: `packaging` is a PyPI library's name)."""
    spec = importlib.util.spec_from_file_location("specdec_bundle_data", PKG / "bundle_data.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu_build():
    from specdec_core.cpu import build

    return build


def _modules_only(folder: str, names: list[str]) -> list[str]:
    """copytree's ignore: what PyInstaller's analysis collects of a package is its modules; its
    data files reach the bundle through the spec's datas alone."""
    return [n for n in names if n == "__pycache__" or (not n.endswith(".py") and not os.path.isdir(os.path.join(folder, n)))]


# Runs a spec the way PyInstaller does (a Python file with SPECPATH, workpath and the build
# classes in its namespace); the classes record their arguments instead of building.
SPEC_RUNNER = textwrap.dedent("""
    import json, os, sys, types
    spec, work = sys.argv[1], sys.argv[2]
    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_submodules = lambda name, filter=None: []
    hooks.copy_metadata = lambda name: got.setdefault("copy_metadata", []).append(name) or []
    sys.modules.update({"PyInstaller": types.ModuleType("PyInstaller"),
                        "PyInstaller.utils": types.ModuleType("PyInstaller.utils"),
                        "PyInstaller.utils.hooks": hooks})
    got = {}

    def toc(datas):
        # Analysis' datas as PyInstaller 6 hands them on: (destination name, source, type), a
        # folder's files under its destination (what the spec's own filtering works on)
        out = []
        for src, dest in datas:
            if os.path.isdir(src):
                for folder, _, names in os.walk(src):
                    for n in names:
                        rel = os.path.relpath(os.path.join(folder, n), src)
                        out.append((os.path.join(dest, rel), os.path.join(folder, n), "DATA"))
            else:
                out.append((os.path.join(dest, os.path.basename(src)), src, "DATA"))
        return out

    def recorder(name):
        def record(*args, **kwargs):
            got[name] = {"args": [a for a in args if isinstance(a, (str, list))],
                         "kwargs": {k: v for k, v in kwargs.items() if isinstance(v, (str, list, bool, type(None)))}}
            return types.SimpleNamespace(binaries=[], datas=toc(kwargs.get("datas", [])), pure=[], scripts=[])
        return record

    ns = {"__name__": "__main__", "__file__": spec, "SPECPATH": os.path.dirname(spec), "workpath": work}
    ns.update({n: recorder(n) for n in ("Analysis", "PYZ", "EXE", "COLLECT", "BUNDLE")})
    exec(compile(open(spec, encoding="utf-8").read(), spec, "exec"), ns)
    print(json.dumps(got))
""")


def run_spec(root: Path, work: Path) -> dict:
    """The spec of the tree at `root`, run: {build step: its recorded arguments}."""
    env = {**os.environ, "SPECDEC_BUNDLE_MODELS": "0"}  # the model parts are checked below, by name
    r = subprocess.run([sys.executable, "-c", SPEC_RUNNER, str(root / "packaging" / SPEC.name), str(work)],
                       capture_output=True, text=True, env=env, cwd=work, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def spec_run(tmp_path_factory):
    work = tmp_path_factory.mktemp("spec-work")
    return run_spec(ROOT, work), work


def test_the_bundle_the_spec_describes_finds_its_assets(spec_run, tmp_path):
    """Lay out the spec's data files as PyInstaller would, with the modules its analysis finds
    (our packages, and the assets package it stages), and let the app and the bench read the
    palette, stylesheet, icons, race presets and bench prompts from there alone."""
    got, _ = spec_run
    bundle = tmp_path / "bundle"
    # the data files the bundle ends up with: COLLECT's, after the spec's own filtering
    (_binaries, datas) = got["COLLECT"]["args"]
    for dest_name, src, _type in datas:
        (bundle / dest_name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, bundle / dest_name)
    assert sorted(p.name for p in (bundle / "specdec_assets").iterdir()) == ASSETS  # every asset, nothing else
    assert "specdec_assets" in got["Analysis"]["kwargs"]["hiddenimports"]
    for path in got["Analysis"]["kwargs"]["pathex"]:  # the modules the analysis collects: modules only
        for pkg in ("app", "specdec_core", "specdec_assets"):
            if (Path(path) / pkg / "__init__.py").is_file():
                shutil.copytree(Path(path) / pkg, bundle / pkg, dirs_exist_ok=True, ignore=_modules_only)
    code = textwrap.dedent("""
        import sys
        from importlib.resources import files
        from pathlib import Path
        import app.theme as theme
        from app.race_view import load_presets
        from specdec_core import assets
        from specdec_core.bench.prompts import load_prompts
        from specdec_core.cpu import abi, build  # abi reads the kernel's ABI from sdcpu.h at import
        assert Path(theme.__file__).is_relative_to(Path.cwd()), theme.__file__
        assert Path(str(files("specdec_assets"))).is_relative_to(Path.cwd())
        assert theme.Theme(False).values["bonus"]["bg"] and "QMainWindow" in theme.Theme(True).stylesheet()
        assert all(assets.path(n).is_file() for n in ("icon.svg", "icon.png"))
        assert load_presets() and load_presets()[0]["prompt"] and load_prompts(categories=["code"])
        assert abi.HEADER.is_relative_to(Path.cwd()) and abi.HEADER.is_file()
        assert all((build.KERNELS / n).is_file() for n in build.SOURCES + build.HEADERS)
        if sys.argv[1] == "built":  # the spec built the kernel: the bundle runs it with no compiler
            assert build.find_or_build(build.PROBE).parent == build.SHIPPED
            assert build.cpu_features() >= 0
            k = build.load_variant(build.BY_NAME["portable"])
            assert k.path.parent == build.SHIPPED, k.path
        print("ok")
    """)
    built = "built" if _cpu_build().compiler() else "no-compiler"
    env = {**os.environ, "PYTHONPATH": str(bundle), "QT_QPA_PLATFORM": "offscreen",
           "CC": "/bin/false", "SPECDEC_CACHE_DIR": str(tmp_path / "empty-cache")}
    r = subprocess.run([sys.executable, "-c", code, built], capture_output=True, text=True, env=env, cwd=bundle,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_spec_script_and_runtime_hooks_exist(spec_run):
    got, _ = spec_run
    assert got["Analysis"]["args"] == [[str(PKG / "launcher.py")]]
    assert got["Analysis"]["kwargs"]["runtime_hooks"] == [str(PKG / "rthook_models.py")]
    assert all(Path(p).is_file() for p in got["Analysis"]["args"][0] + got["Analysis"]["kwargs"]["runtime_hooks"])
    assert got["EXE"]["kwargs"]["name"] == "specdec-chat" and got["COLLECT"]["kwargs"]["name"] == "specdec-chat"
    for script in ("build_linux.sh", "selftest_clean_env.sh"):
        r = subprocess.run(["bash", "-n", str(PKG / script)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_the_launcher_runs_the_pyproject_entry_point(tmp_path):
    assert _pyproject()["scripts"]["specdec-chat"] == "app.main:main"
    r = subprocess.run([sys.executable, str(PKG / "launcher.py"), "--version"], capture_output=True, text=True,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"specdec-chat {_pyproject()['version']}", r.stderr


def test_the_version_comes_from_pyproject_only(tmp_path, capsys):
    """Change the version in a copy of the tree: the spec's bundle metadata follows it."""
    root = tmp_path / "tree"
    for part in ("app", "specdec_core", "assets", "packaging"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__", "dist", "build"))
    version = _pyproject()["version"]
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert f'version = "{version}"' in text
    (root / "pyproject.toml").write_text(text.replace(f'version = "{version}"', 'version = "9.8.7"'), encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    run_spec(root, work)
    meta = work / "meta" / "specdec_chat-9.8.7.dist-info" / "METADATA"
    assert "Version: 9.8.7" in meta.read_text(encoding="utf-8").splitlines()
    from app.main import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"specdec-chat {version}"
    from app.main_window import app_version  # the About dialog's

    assert app_version() == version


def test_bundled_model_packages_match_the_engine():
    from specdec_core.models.default_pair import EMBEDDED

    from_pyproject = {req.split("==")[0] for req in _pyproject()["optional-dependencies"]["embedded"]}
    from_engine = {p.distribution for m in EMBEDDED.values() for p in m.parts}
    assert from_pyproject == from_engine


def test_runtime_hook_finds_model_distributions_but_imports_nothing(tmp_path):
    """A fake data package unpacked in a models folder: importlib.metadata sees it through the
    hook (as default_pair.find_part does), its module stays unimportable."""
    models = tmp_path / "models"
    (models / "fake_part1" / "data").mkdir(parents=True)
    (models / "fake_part1" / "data" / "part01.bin").write_bytes(b"x" * 10)
    (models / "fake_part1" / "__init__.py").write_text("raise SystemExit('must not be imported')\n")
    info = models / "fake_part1-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-part1\nVersion: 0.1.0\n")
    (info / "RECORD").write_text("fake_part1/data/part01.bin,,10\nfake_part1-0.1.0.dist-info/RECORD,,\n")
    code = textwrap.dedent(f"""
        import runpy, sys
        from importlib import metadata
        from pathlib import Path
        runpy.run_path({str(PKG / 'rthook_models.py')!r})
        from specdec_core.models.default_pair import Part, find_part
        p = find_part(Part("fake-part1", "0.1.0", "fake_part1/data/part01.bin"))
        assert p is not None and p.read_bytes() == b"x" * 10, p
        try:
            import fake_part1
        except ImportError:
            pass
        else:
            raise AssertionError("models folder must not be importable")
        print("ok")
    """)
    env = {"SPECDEC_MODELS_DIR": str(models), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


@pytest.mark.parametrize("name", ["README.md", "windows/specdec-chat.iss", "windows/README.md", "macos/README.md",
                                  "macos/build_macos.sh", ".gitignore"])
def test_recipes_present(name):
    assert (PKG / name).is_file()


def test_the_wheel_ships_the_files_the_code_reads(tmp_path):
    """`pip install .` (not editable) must work: build the wheel offline, check its file list,
    then read the bench's built-in prompts and the app's assets from the unpacked wheel alone
    (a wheel installed into a fresh venv once failed: no such file .../site-packages/assets/...)."""
    src = tmp_path / "src"
    for part in ("app", "specdec_core", "assets"):
        shutil.copytree(ROOT / part, src / part, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "-q", "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (wheel,) = (tmp_path / "dist").glob("specdec_chat-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped_assets = sorted(n.split("/")[-1] for n in names if n.startswith("specdec_assets/"))
    assert shipped_assets == sorted(ASSETS + ["__init__.py"])
    kernel_sources = {f"specdec_core/cpu/kernels/{n}" for n in ("blocks.c", "quants.c", "x8_narrow.c", "attention.c", "forward.c", "features.c", "sdcpu.h",
                                                                  "dot_portable.h", "dot_x86.h", "dot_neon.h")}
    assert {"specdec_assets/bench_prompts.jsonl", "app/main.py", "specdec_core/cli/dispatch.py",
            "specdec_core/models/last_load.py"} | kernel_sources <= names
    assert not [n for n in names if n.startswith(("assets/", "tests/", "docs/"))]
    # every package of the source tree is in the wheel (pyproject.toml names them one by one)
    for init in list(ROOT.glob("specdec_core/**/__init__.py")) + list(ROOT.glob("app/**/__init__.py")):
        assert init.relative_to(ROOT).as_posix() in names, init
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/entry_points.txt"))
    entry_points = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert "specdec = specdec_core.cli:main" in entry_points and "specdec-chat = app.main:main" in entry_points
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = textwrap.dedent("""
        from importlib.resources import files
        from pathlib import Path
        from specdec_core.bench.prompts import load_prompts
        import app.theme as theme
        from app.race_view import load_presets
        site = Path.cwd()
        assert Path(str(files("specdec_assets"))).is_relative_to(site) and Path(theme.__file__).is_relative_to(site)
        assert len(load_prompts(categories=["code"])) >= 2 and load_presets()
        assert theme.Theme(False).values and theme.Theme(False).stylesheet()
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": str(site), "QT_QPA_PLATFORM": "offscreen"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=site, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


# ---- package data: the files the code reads from its own packages at run time, the ones
# pyproject.toml's [tool.setuptools.package-data] ships, and the ones the spec collects
# (packaging/bundle_data.py, the same globs). A bundle once failed its self-test ("could not
# load default: FileNotFoundError: .../_internal/specdec_core/cpu/kernels/sdcpu.h"): the spec
# dropped the kernel's header -- read at run time, its ABI (specdec_core/cpu/abi.py) -- along
# with other packages' build-only headers.

KERNELS = ROOT / "specdec_core" / "cpu" / "kernels"


def _shipped_files() -> dict[str, str]:
    """{bundle path: source} of every file pyproject's package-data globs match, expanded here
    on their own (Path.glob), not through bundle_data."""
    cfg = _setuptools()
    out = {}
    for package, globs in cfg["package-data"].items():
        folder = ROOT / cfg.get("package-dir", {}).get(package, package.replace(".", "/"))
        for pattern in globs:
            for path in folder.glob(pattern):
                if path.is_file() and not path.name.startswith(".") and "__pycache__" not in path.parts:
                    out["/".join([*package.split("."), *path.relative_to(folder).parts])] = str(path.resolve())
    return out


def test_bundle_data_collects_every_file_pyproject_ships():
    collected = _bundle_data().package_data(ROOT)
    assert {f"{dest}/{Path(src).name}": str(Path(src).resolve()) for src, dest in collected} == _shipped_files()
    pairs = {(str(Path(src).resolve()), dest) for src, dest in collected}
    # the known reads, each into the folder the code looks in
    assert (str(KERNELS / "sdcpu.h"), "specdec_core/cpu/kernels") in pairs
    kernel_sources = sorted(KERNELS.glob("*.c")) + sorted(KERNELS.glob("*.h"))
    assert len(kernel_sources) >= 4
    for path in kernel_sources:
        assert (str(path), "specdec_core/cpu/kernels") in pairs, path
    for name in ASSETS:  # every data file of assets/, into the package the code reads them from
        assert (str(ROOT / "assets" / name), "specdec_assets") in pairs, name
    assert {".json", ".jsonl", ".npy", ".png", ".qss", ".svg"} <= {Path(n).suffix for n in ASSETS}


def test_bundle_data_follows_pyproject(tmp_path):
    """The globs come from pyproject.toml, nowhere else: a glob added there, a package mapped to
    another folder and a built kernel in kernels/lib/ are collected with no edit to the spec."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    old = 'specdec_assets = ["*.json",'
    assert old in text
    (tmp_path / "pyproject.toml").write_text(text.replace(old, 'specdec_assets = ["notes/*.txt", "*.json",'),
                                             encoding="utf-8")
    (tmp_path / "assets" / "notes").mkdir(parents=True)
    for name in ("palette.json", "notes/a.txt", ".hidden.json", "skipped.txt"):
        (tmp_path / "assets" / name).write_text("x")
    lib = tmp_path / "specdec_core" / "cpu" / "kernels" / "lib"
    lib.mkdir(parents=True)
    (lib / "sdcpu-portable-0123456789ab.so").write_bytes(b"\x7fELF")
    (lib.parent / "sdcpu.h").write_text("/* */")
    got = {(Path(src).relative_to(tmp_path.resolve()).as_posix(), dest)
           for src, dest in _bundle_data().package_data(tmp_path)}
    assert got == {("assets/palette.json", "specdec_assets"), ("assets/notes/a.txt", "specdec_assets/notes"),
                   ("specdec_core/cpu/kernels/sdcpu.h", "specdec_core/cpu/kernels"),
                   ("specdec_core/cpu/kernels/lib/sdcpu-portable-0123456789ab.so", "specdec_core/cpu/kernels/lib")}


def test_the_spec_filter_keeps_our_headers_and_drops_other_packages():
    bd = _bundle_data()
    ours = bd.package_data(ROOT)
    keep = bd.bundle_paths(ours)
    assert "specdec_core/cpu/kernels/sdcpu.h" in keep
    theirs = [("torch/include/ATen/ATen.h", "/site/torch/include/ATen/ATen.h", "DATA"),
              ("numpy/__init__.pyi", "/site/numpy/__init__.pyi", "DATA"),
              ("somepkg/lib/libx.a", "/site/somepkg/lib/libx.a", "DATA"),
              ("somepkg/x.h", "/site/somepkg/x.h", "DATA"),
              ("transformers/models/auto/x.json", "/site/transformers/models/auto/x.json", "DATA")]
    toc = [(f"{dest}/{Path(src).name}", src, "DATA") for src, dest in ours] + theirs
    toc.append(("specdec_core\\cpu\\kernels\\dot_x86.h", str(KERNELS / "dot_x86.h"), "DATA"))  # Windows' separators
    kept = {e[0].replace("\\", "/") for e in bd.drop_build_only(toc, keep)}
    assert kept == keep | {"transformers/models/auto/x.json"}


def test_the_spec_bundles_every_package_data_file(spec_run):
    """The spec run (build steps recorded): its Analysis gets every package data file, and after
    its own filtering of Analysis' datas the bundle (COLLECT) still holds each -- the kernel's
    header above all -- beside the kernel libraries where build.py looks for them."""
    got, _ = spec_run
    analysed = {(str(Path(src).resolve()), dest) for src, dest in got["Analysis"]["kwargs"]["datas"]}
    assert {(str(Path(src).resolve()), dest) for src, dest in _bundle_data().package_data(ROOT)} <= analysed
    (_binaries, datas) = got["COLLECT"]["args"]
    bundled = {entry[0].replace("\\", "/"): entry[1] for entry in datas}
    missing = sorted(set(_shipped_files()) - set(bundled))
    assert not missing, f"package data the bundle lacks: {missing}"
    assert "specdec_core/cpu/kernels/sdcpu.h" in bundled
    build = _cpu_build()
    if build.compiler():
        for variant in (build.PROBE, build.BY_NAME["portable"]):
            assert f"specdec_core/cpu/kernels/lib/{build.library_name(variant)}" in bundled, variant.name


def test_the_spec_excludes_nothing_the_two_commands_import(spec_run):
    """Both commands of the bundle (the window and `specdec`, every subcommand) import nothing
    the spec leaves out: `specdec` imports its bench command at start, and a spec that left
    specdec_core.bench out made every `specdec` command of the bundle fail."""
    got, _ = spec_run
    excludes = got["Analysis"]["kwargs"]["excludes"]
    code = textwrap.dedent("""
        import json, sys
        import app.main, app.main_window, specdec_core.cli
        from specdec_core.cli.dispatch import COMMANDS, build_parser
        build_parser()
        excluded = json.loads(sys.argv[1])
        print(json.dumps(sorted(m for m in sys.modules if any(m == e or m.startswith(e + ".") for e in excluded))))
    """)
    r = subprocess.run([sys.executable, "-c", code, json.dumps(excludes)], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, "QT_QPA_PLATFORM": "offscreen"}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1]) == []
    assert not [e for e in excludes if e.split(".")[0] in ("app", "specdec_core", "specdec_assets")]


def test_the_spec_leaves_out_torchs_test_programs_only():
    bd = _bundle_data()
    for name in ("test_jit", "test_api", "TCPStoreTest", "HashStoreTest", "protoc", "protoc-3.13.0.0"):
        assert bd.is_torch_tool(f"torch/bin/{name}") and bd.is_torch_tool(f"torch\\bin\\{name}"), name
    for dest in ("torch/bin/torch_shm_manager", "torch/lib/libtorch_cpu.so", "test_jit", "torch/bin/sub/test_x",
                 "specdec_core/cpu/kernels/lib/test_x.so", "torch/testing/_internal/test_x.py"):
        assert not bd.is_torch_tool(dest), dest


# How the code finds its package files. specdec_core.assets is the one accessor of the assets
# package (importlib.resources); other modules that read files beside their own (__file__) are
# named here with the files they read, which must ship -- or why what they read is no package file.
ASSET_ACCESSORS = {"read_text", "read_bytes", "path"}


def _beside_module_files():
    from specdec_core.cpu import abi, build

    return {
        "specdec_core/cpu/abi.py": [abi.HEADER],
        "specdec_core/cpu/build.py": [build.KERNELS / n for n in build.SOURCES + build.HEADERS],
    }


NOT_PACKAGE_FILES = {
    # the held-out text of `python -m specdec_core.bench.quality`: the repository's README.md, a
    # measurement run from a checkout (the bundle leaves specdec_core.bench out)
    "specdec_core/bench/quality.py": "README.md",
}
MODULE_CALLS_TO_RESOURCES = ("importlib.resources", "importlib_resources", "pkgutil", "pkg_resources")


def _asset_names(arg: ast.expr, tree: ast.Module, call: ast.Call) -> list[str] | None:
    """The asset names (fnmatch patterns where part is computed) an accessor's argument can
    take, as far as this module's text says; None where it cannot be told."""
    def pattern(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "*" for v in node.values)
        return None

    if pattern(arg) is not None:
        return [pattern(arg)]
    if isinstance(arg, ast.Name):
        for node in tree.body:  # a module constant
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == arg.id for t in node.targets) \
                    and pattern(node.value) is not None:
                return [pattern(node.value)]
        for node in ast.walk(tree):  # a loop over literal names around the call
            if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and node.target.id == arg.id \
                    and isinstance(node.iter, (ast.Tuple, ast.List)) and any(n is call for n in ast.walk(node)):
                names = [pattern(e) for e in node.iter.elts]
                return names if None not in names else None
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name):
        for node in tree.body:  # a module function that returns a name
            if isinstance(node, ast.FunctionDef) and node.name == arg.func.id:
                names = [pattern(r.value) for r in ast.walk(node) if isinstance(r, ast.Return) and r.value]
                return names if names and None not in names else None
    return None


def test_the_code_reads_only_package_files_pyproject_ships():
    """Every package file the sources read is one pyproject's package-data ships (so the wheel
    and the bundle have it): the assets each accessor call names, the files modules read beside
    themselves. A read this scan cannot place fails here, to be added above."""
    shipped = _shipped_files()
    asset_globs = _setuptools()["package-data"]["specdec_assets"]
    shipped_assets = [p.split("/", 1)[1] for p in shipped if p.startswith("specdec_assets/")]
    beside = _beside_module_files()
    read, problems, file_users = set(), [], set()
    for path in sorted(ROOT.glob("app/**/*.py")) + sorted(ROOT.glob("specdec_core/**/*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "__file__":
                file_users.add(rel)
            if rel != "specdec_core/assets.py" and isinstance(node, (ast.Import, ast.ImportFrom)):
                module = node.module if isinstance(node, ast.ImportFrom) else None
                names = [module] + [f"{module}.{a.name}" if module else a.name for a in node.names] if module \
                    else [a.name for a in node.names]
                if any(n == m or n.startswith(f"{m}.") for n in names for m in MODULE_CALLS_TO_RESOURCES):
                    problems.append(f"{rel}:{node.lineno}: reads package files other than through specdec_core.assets")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ASSET_ACCESSORS and isinstance(node.func.value, ast.Name) \
                    and node.func.value.id == "assets" and node.args:
                names = _asset_names(node.args[0], tree, node)
                if names is None:
                    problems.append(f"{rel}:{node.lineno}: assets.{node.func.attr}() of a name this test cannot tell")
                    continue
                for name in names:
                    read.add(name)
                    covered = any(fnmatch.fnmatch(name.replace("*", "x"), g) for g in asset_globs)
                    present = [a for a in shipped_assets if fnmatch.fnmatch(a, name)]
                    if not covered or not present:
                        problems.append(f"{rel}:{node.lineno}: reads asset {name!r}, which package-data does not ship")
    for rel in sorted(file_users):
        if rel in NOT_PACKAGE_FILES:
            continue
        if rel not in beside:
            problems.append(f"{rel}: finds files beside itself (__file__): name them in _beside_module_files()")
            continue
        for f in beside[rel]:
            bundle_path = Path(f).resolve().relative_to(ROOT).as_posix()
            if bundle_path not in shipped:
                problems.append(f"{rel}: reads {bundle_path}, which package-data does not ship")
    # the kernel's sources include each other: every included file ships
    for src in sorted(KERNELS.glob("*.[ch]")):
        for inc in re.findall(r'#\s*include\s+"([^"]+)"', src.read_text(encoding="utf-8")):
            if f"specdec_core/cpu/kernels/{inc}" not in shipped:
                problems.append(f"{src.name} includes {inc}, which package-data does not ship")
    assert not problems, "\n".join(problems)
    # the scan sees the reads it is known to see (it would pass vacuously otherwise)
    assert {"palette.json", "style.qss", "icon.svg", "icon.png", "race_prompts.json", "bench_prompts.jsonl",
            "draft_vocab_*.npy"} <= read, read
    assert {"specdec_core/cpu/abi.py", "specdec_core/cpu/build.py"} <= file_users
    assert "specdec_core/cpu/kernels/sdcpu.h" in shipped and {
        f"specdec_core/cpu/kernels/{n}" for n in ("blocks.c", "quants.c", "attention.c", "forward.c", "features.c")} <= set(shipped)


def test_the_bundle_carries_every_runtime_dependency_s_metadata(spec_run):
    """Libraries read distribution metadata when imported (llguidance its own version; the
    bundle without it answered every constrained request with PackageNotFoundError): the spec
    copies it for each runtime dependency pyproject names."""
    got, _ = spec_run
    with open(ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    names = {re.split(r"[\s;<>=!~\[]", d, maxsplit=1)[0].lower() for d in deps}
    assert {"llguidance", "transformers", "torch", "httpx"} <= names
    assert names <= set(got["copy_metadata"])
