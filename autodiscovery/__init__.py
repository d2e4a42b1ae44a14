"""AutoDiscovery: autonomous, measured optimization of GPU kernels."""

from pathlib import Path

__version__ = "0.1.0"

ROOT = Path(__file__).resolve().parents[1]
"""The project checkout: campaigns, seeds and the default run folder live beside the package."""


class AutoDiscoveryError(Exception):
    """An error the user can act on; the CLI prints its message on one line and exits non-zero."""


class RunFailed(AutoDiscoveryError):
    """A run cannot go on as configured (an endpoint refuses its requests, say): it ends `failed`, what
    was recorded stays, and `run --resume` with the cause fixed (`--set ...`) continues it."""
