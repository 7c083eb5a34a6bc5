"""The commands layer: what a task in tasks.py runs, on top of every stage of the pipeline."""
