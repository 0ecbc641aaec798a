"""What people look at: figures of replays and sweeps (matplotlib, the ``plot`` extra), the
self-contained HTML pages built from them, and the notebook summary card."""
