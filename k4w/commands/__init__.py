"""The commands users run: the layer on top of every stage.

No imports here: importing one module of this package loads nothing else."""
