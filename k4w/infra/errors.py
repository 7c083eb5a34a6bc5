"""Errors a user can act on. The CLI prints them without a traceback."""


class K4wError(Exception):
    """A failure with a message meant for the user."""


class ConfigError(K4wError):
    """cluster.yml is malformed or inconsistent. Each problem names its field and line."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s):\n{lines}")


class ToolMissing(K4wError):
    """A program k4w needs is not installed. The message names the install command."""

    def __init__(self, tool: str, install: str):
        self.tool = tool
        self.install = install
        super().__init__(f"'{tool}' is not installed. Install it with: {install}")
