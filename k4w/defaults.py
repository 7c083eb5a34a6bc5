"""Invoke configuration under the "k4w" key: tasks.py installs these as the collection's defaults;
invoke.yaml or INVOKE_K4W_OUT=... override them, a task's option overrides all. A module of its own,
so that tasks.py loads without the package behind k4w.commands.cli."""

DEFAULTS = {"config": "cluster.yml", "out": "build", "dry_run": False}
