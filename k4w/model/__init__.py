"""The config model: cluster.yml validated once, box profiles, pins and the facts they rest on.

No imports here: importing one module of this package loads nothing else."""
