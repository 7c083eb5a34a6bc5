"""The --out folder: its lock, its state and the private files in it (not named out/: a source folder
is never named like an output folder).

No imports here: importing one module of this package loads nothing else."""
