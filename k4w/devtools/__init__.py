"""What only scripts/ uses: building the pinned tools and generating flag tables.

No imports here: importing one module of this package loads nothing else."""
