"""PyInstaller entry script for `specdec-chat`: the same entry point as pyproject's
[project.scripts] (app.main:main). A package-relative module cannot be the script itself."""

import sys

from app.main import main

if __name__ == "__main__":
    sys.exit(main())
