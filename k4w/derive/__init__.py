"""Values derived once from the resolved model (proxy, step environment, registry, identities, join config).

No imports here: importing one module of this package loads nothing else."""
