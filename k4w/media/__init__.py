"""Install media: ISOs, their image indexes and the build media a bake serves.

No imports here: importing one module of this package loads nothing else."""
