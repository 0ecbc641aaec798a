"""``python -m dynosim`` runs the command line."""

import sys

from dynosim.cli import main

sys.exit(main())
