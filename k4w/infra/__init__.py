"""What every stage stands on: processes, tools, locks, console, redaction, signals, errors, vagrant and packer.

No imports here: importing one module of this package loads nothing else."""
