"""`python -m k4w TASK ...` (and the `k4w` command): the same as `invoke TASK ...`, with k4w's Ctrl-C
and SIGTERM handling installed before Invoke itself is imported.

Invoke's own `invoke` command imports Invoke and parses the command line before it loads tasks.py,
which installs the handler first thing: a Ctrl-C in that first part of a second (longer on a busy
host) would show Python's KeyboardInterrupt traceback. Here only Python's own start-up comes first.
"""

from k4w.infra import signals

signals.install()


def main() -> None:
    import sys

    from invoke.main import program  # Invoke's own entry: the same tasks.py, invoke.yaml and options

    program.run(["k4w", *sys.argv[1:]])  # exits with the task's code


if __name__ == "__main__":
    main()
