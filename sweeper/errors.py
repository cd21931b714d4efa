"""The one error type for bad input: a single line that names the key, the value and the fix."""


class ConfigError(Exception):
    """Bad user input, found before any trial starts. The CLI prints it as one line and exits 2."""

    def __init__(self, key: str, problem: str, fix: str) -> None:
        self.key, self.problem, self.fix = key, problem, fix
        super().__init__(f"`{key}`: {problem}; {fix}")
