"""Packaging checks that need no build: the PyInstaller spec names assets, scripts and hooks that
exist, the entry point and version come from pyproject, the model-finding runtime hook works.

The full build + self-test of the bundle is a separate command (minutes, GBs):
    bash packaging/build_linux.sh --self-test
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "packaging"
SPEC = PKG / "specdec-chat.spec"


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _spec_constants() -> dict:
    """Top-level `NAME = <literal>` assignments of the spec (it is Python run by PyInstaller)."""
    tree = ast.parse(SPEC.read_text(encoding="utf-8"))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def test_spec_bundles_the_assets_the_app_reads():
    """The spec ships every file of assets/ into assets/ (where app/theme.py:assets_dir() looks
    in a bundle); every asset the code names exists there."""
    consts = _spec_constants()
    assert consts["ASSET_DIR"] == "assets"
    text = SPEC.read_text(encoding="utf-8")
    assert "(ROOT / ASSET_DIR).iterdir()" in text and "(str(ROOT / ASSET_DIR / name), ASSET_DIR)" in text
    theme = (ROOT / "app" / "theme.py").read_text(encoding="utf-8")
    assert 'Path(base) / "assets"' in theme  # sys._MEIPASS/assets first
    named = set()
    for src in list((ROOT / "app").glob("*.py")):
        code = src.read_text(encoding="utf-8")
        named |= set(re.findall(r'assets_dir\(\) / "([^"]+)"', code))
    named |= {"icon.svg", "icon.png"}  # theme.app_icon() loops over these names
    assert {"palette.json", "style.qss"} <= named
    for name in sorted(named):
        assert (ROOT / "assets" / name).is_file(), f"the app reads assets/{name}, which does not exist"


def test_spec_script_and_runtime_hooks_exist():
    text = SPEC.read_text(encoding="utf-8")
    for rel in ("packaging/launcher.py", "packaging/rthook_models.py"):
        a, b = rel.split("/")
        assert f'"{a}" / "{b}"' in text, f"spec does not reference {rel}"
        assert (ROOT / rel).is_file()
    for script in ("build_linux.sh", "selftest_clean_env.sh"):
        r = subprocess.run(["bash", "-n", str(PKG / script)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_entry_point_is_the_pyproject_one():
    consts = _spec_constants()
    scripts = _pyproject()["scripts"]
    assert consts["ENTRY_POINT"] == scripts["specdec-chat"] == "app.main:main"
    launcher = (PKG / "launcher.py").read_text(encoding="utf-8")
    module, attr = consts["ENTRY_POINT"].split(":")
    assert f"from {module} import {attr}" in launcher
    import importlib

    assert callable(getattr(importlib.import_module(module), attr))


def test_version_from_pyproject_only(capsys):
    version = _pyproject()["version"]
    text = SPEC.read_text(encoding="utf-8")
    assert 'tomllib.load(f)["project"]' in text and 'VERSION = PROJECT["version"]' in text
    assert version not in text.replace('"version"', ""), "the spec must not hard-code the version"
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
