"""`python -m service`: the command line (service.app.cli)."""

import sys

from service.app.cli import main

if __name__ == "__main__":
    sys.exit(main())
