"""Course tooling: grading, the recovery checkpoint, the command line."""
