"""`python -m minillm`: the command line lives in the tools wing (minillm/tools/cli.py)."""

import sys

from .tools.cli import main

if __name__ == "__main__":
    sys.exit(main())
