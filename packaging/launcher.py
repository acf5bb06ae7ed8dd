"""PyInstaller entry script for both commands of the bundle, `specdec-chat` and `specdec`: the
entry points of pyproject's [project.scripts] (app.main:main, specdec_core.cli:main).

One executable, two names: started as `specdec` (the bundle's `specdec` symlink, or
/usr/bin/specdec of the .deb) it is the command line, under any other name the window. A second
PyInstaller executable would carry a second copy of the whole Python archive (torch,
transformers, ... tens of MB); a symlink costs nothing, and the bootloader resolves it to the
bundle beside the real file. A package-relative module cannot be the script itself.
"""

import os
import sys

# program name -> entry point, the same strings as pyproject.toml's [project.scripts]
# (specdec-chat.spec checks that they agree)
ENTRY_POINTS = {"specdec": "specdec_core.cli:main", "specdec-chat": "app.main:main"}
DEFAULT = "specdec-chat"


def entry_point_for(argv0: str) -> str:
    """The entry point a program started as `argv0` runs: by its file name (without a Windows
    .exe), the window for any name but `specdec`."""
    name = os.path.basename(argv0 or "")
    if name.lower().endswith(".exe"):
        name = name[:-4]
    return ENTRY_POINTS.get(name, ENTRY_POINTS[DEFAULT])


def main() -> int:
    module, func = entry_point_for(sys.argv[0]).split(":")
    # explicit imports, so PyInstaller's analysis sees both packages from this script
    if module == "specdec_core.cli":
        from specdec_core.cli import main as run
    else:
        from app.main import main as run
    assert run.__module__.startswith(module) and run.__name__ == func
    return run()


if __name__ == "__main__":
    sys.exit(main())
