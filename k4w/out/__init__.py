"""The --out folder: files written atomically and privately, its lock and its state.

No imports here: importing one module of this package loads nothing else."""
