"""Packaging checks that need no PyInstaller build, by behaviour: the spec is run (with
PyInstaller's build steps recorded, not executed) and the bundle it describes is laid out and
imported; the launcher is run; the wheel is built, its file list checked, and the bench and
the app read their files from the installed wheel alone.

The full build + self-test of the bundle is a separate command (minutes, GBs):
    bash packaging/build_linux.sh --self-test
"""

from __future__ import annotations

import json
import os
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


# Runs a spec the way PyInstaller does (a Python file with SPECPATH, workpath and the build
# classes in its namespace); the classes record their arguments instead of building.
SPEC_RUNNER = textwrap.dedent("""
    import json, os, sys, types
    spec, work = sys.argv[1], sys.argv[2]
    hooks = types.ModuleType("PyInstaller.utils.hooks")
    hooks.collect_submodules = lambda name, filter=None: []
    hooks.copy_metadata = lambda name: []
    sys.modules.update({"PyInstaller": types.ModuleType("PyInstaller"),
                        "PyInstaller.utils": types.ModuleType("PyInstaller.utils"),
                        "PyInstaller.utils.hooks": hooks})
    got = {}

    def recorder(name):
        def record(*args, **kwargs):
            got[name] = {"args": [a for a in args if isinstance(a, (str, list))],
                         "kwargs": {k: v for k, v in kwargs.items() if isinstance(v, (str, list, bool, type(None)))}}
            return types.SimpleNamespace(binaries=[], datas=list(kwargs.get("datas", [])), pure=[], scripts=[])
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
    for src, dest in got["Analysis"]["kwargs"]["datas"]:
        target = bundle / dest
        if Path(src).is_dir():
            shutil.copytree(src, target / Path(src).name)
        else:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, target)
    assert sorted(p.name for p in (bundle / "specdec_assets").iterdir()) == ASSETS  # every asset, nothing else
    assert "specdec_assets" in got["Analysis"]["kwargs"]["hiddenimports"]
    for path in got["Analysis"]["kwargs"]["pathex"]:  # the modules the analysis collects
        for pkg in ("app", "specdec_core", "specdec_assets"):
            if (Path(path) / pkg / "__init__.py").is_file():
                shutil.copytree(Path(path) / pkg, bundle / pkg, dirs_exist_ok=True,
                                ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    code = textwrap.dedent("""
        from importlib.resources import files
        from pathlib import Path
        import app.theme as theme
        from app.race_view import load_presets
        from specdec_core import assets
        from specdec_core.bench.prompts import load_prompts
        assert Path(theme.__file__).is_relative_to(Path.cwd()), theme.__file__
        assert Path(str(files("specdec_assets"))).is_relative_to(Path.cwd())
        assert theme.Theme(False).values["bonus"]["bg"] and "QMainWindow" in theme.Theme(True).stylesheet()
        assert all(assets.path(n).is_file() for n in ("icon.svg", "icon.png"))
        assert load_presets() and load_presets()[0]["prompt"] and load_prompts(categories=["code"])
        print("ok")
    """)
    env = {**os.environ, "PYTHONPATH": str(bundle), "QT_QPA_PLATFORM": "offscreen"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=bundle, timeout=120)
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
    kernel_sources = {f"specdec_core/cpu/kernels/{n}" for n in ("quants.c", "forward.c", "features.c", "sdcpu.h",
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
