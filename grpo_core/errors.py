"""Errors that the command line turns into one line and an exit code, and the masking of secrets
in anything it prints or logs."""

import re
import signal


class UserInputError(ValueError):
    """Bad input from the user: a config key, a file, a name. Message is one line; exit code 2."""


class ConfigError(UserInputError):
    """A config value that is not allowed; the message names the key and what is allowed."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"{key}: {message}")


class RunFailure(RuntimeError):
    """A run stopped on purpose (non-finite loss, a reward function that raised, ...); exit code 1."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill, Slurm, Kubernetes, docker stop): handled as Ctrl-C is, exit code 143."""


def _raise_terminated(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # while the run is recorded as killed
    raise Terminated()


def handle_sigterm() -> None:
    """From now on SIGTERM raises Terminated in the main thread, so runs and sweeps end as they do
    on Ctrl-C (recorded as killed). A second SIGTERM during that record is ignored."""
    signal.signal(signal.SIGTERM, _raise_terminated)


_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][\w+.-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@/\s]*)@")


def mask_secrets(text: str) -> str:
    """`scheme://user:password@host` → `scheme://user:***@host` anywhere in the text."""
    return _CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:***@", str(text))
