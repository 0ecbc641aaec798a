"""``python -m dynosim.bench`` runs ``offline_replay_bench``."""

import sys

from dynosim.bench import main

sys.exit(main())
