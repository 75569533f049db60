"""Portal's node: supervises a job's process on one machine, watches notices, saves checkpoints."""
