"""Errors that the command line turns into one line and exit code 2."""


class UserInputError(ValueError):
    """Bad input from the user: a config key, a file, a name. Message is one line."""


class ConfigError(UserInputError):
    """A config value that is not allowed; the message names the key and what is allowed."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


class RunFailure(RuntimeError):
    """A run stopped on purpose (non-finite loss, a reward function that raised, ...)."""
