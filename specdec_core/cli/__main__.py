import sys

from .dispatch import main

sys.exit(main())
