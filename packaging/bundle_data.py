"""The package data files of the PyInstaller bundle, from pyproject.toml.

The code reads files from its own packages at run time: the CPU kernel's C header (its ABI,
specdec_core/cpu/abi.py) and sources (a library's name is a hash of them), the kernel
libraries built ahead (kernels/lib/), the assets package `specdec_assets` (the top-level
assets/ folder: palette, stylesheet, icons, race presets, bench prompts, draft-vocabulary
rankings). pyproject.toml's [tool.setuptools.package-data] declares them for the wheel; the
spec (specdec-chat.spec) collects the same globs through `package_data()`, so the wheel and
the bundle cannot ship different files. tests/test_packaging.py checks both against what the
code reads.

Plain Python, no PyInstaller: the spec and the tests import it by path (a module of this
folder cannot be imported as `packaging.*`, the name of a PyPI library PyInstaller uses).
"""

from __future__ import annotations

import glob
import os
import tomllib
from pathlib import Path, PurePosixPath

# Files a bundle needs only to build against a library (headers, static libraries, stubs):
# the spec drops them from what other packages bring, never from our own package data.
BUILD_ONLY_SUFFIXES = (".h", ".hpp", ".cuh", ".cpp", ".lib", ".a", ".pyi")


def setuptools_config(root: Path) -> dict:
    """pyproject.toml's [tool.setuptools] table."""
    with open(Path(root) / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def package_source_dir(root: Path, package: str, config: dict) -> Path:
    """Where a package's files are in the source tree, as setuptools maps it (package-dir:
    the longest mapped prefix of the dotted name; "" maps the root)."""
    mapping = config.get("package-dir", {})
    parts = package.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in mapping:
            return Path(root, mapping[prefix], *parts[i:])
    return Path(root, mapping.get("", ""), *parts)


def package_data(root: Path) -> list[tuple[str, str]]:
    """Every file pyproject's package-data globs match, as PyInstaller datas: (source file,
    destination folder in the bundle). The destination is the file's place in its installed
    package -- the package's dotted name as folders, then the file's folder under it -- where
    importlib.resources and Path(__file__) find it in a bundle as in a wheel. A "*" key applies
    to every package, as in setuptools."""
    root = Path(root).resolve()
    config = setuptools_config(root)
    declared = config.get("package-data", {})
    packages = list(config.get("packages", []))
    out: set[tuple[str, str]] = set()
    for package in packages + [p for p in declared if p != "*" and p not in packages]:
        patterns = list(declared.get("*", [])) + list(declared.get(package, []))
        if not patterns:
            continue
        base = package_source_dir(root, package, config)
        for pattern in patterns:
            # the same expansion setuptools' build_py makes (glob, recursive, files only)
            for match in glob.glob(os.path.join(glob.escape(str(base)), pattern), recursive=True):
                path = Path(match)
                if not path.is_file() or "__pycache__" in path.parts:
                    continue
                rel = path.relative_to(base)
                out.add((str(path), PurePosixPath(*package.split("."), *rel.parent.parts).as_posix()))
    return sorted(out)


def bundle_paths(datas) -> set[str]:
    """The files (source, destination folder) datas put in the bundle, as bundle-relative
    POSIX paths."""
    return {PurePosixPath(dest.replace("\\", "/"), Path(src).name).as_posix() for src, dest in datas}


def drop_build_only(toc, keep: set[str]) -> list:
    """An Analysis' datas (PyInstaller's TOC: (destination name, source, type) entries) without
    the build-only files other packages bring (BUILD_ONLY_SUFFIXES, anything under an include/
    folder): not needed at run time. Entries whose destination is in `keep` (bundle_paths of
    our package data: the kernel's C header is read at run time) always stay."""
    kept = []
    for entry in toc:
        dest = entry[0].replace("\\", "/")
        if dest not in keep and (dest.endswith(BUILD_ONLY_SUFFIXES) or "/include/" in dest):
            continue
        kept.append(entry)
    return kept


def is_torch_tool(dest: str) -> bool:
    """A program in torch/bin that only torch's own tests and builds run (test_*, *Test, protoc):
    the spec leaves them out of the bundle. torch_shm_manager is not one."""
    path = PurePosixPath(dest.replace("\\", "/"))
    return path.parent.as_posix() == "torch/bin" and (
        path.name.startswith(("test_", "protoc")) or path.name.endswith("Test"))
