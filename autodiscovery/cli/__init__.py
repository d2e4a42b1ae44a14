"""The `autodiscovery` command: thin commands over the library, Rich tables, --json where useful.

`running` holds the commands that do work (run, measure, profile, ladder, replay), `reviewing` those that
read the database (runs, show, lineage, report, diff, export, prompt), `serving` the web view (serve),
`tooling` the set-up (doctor, campaigns); `common` what they share.
"""

from autodiscovery.cli import reviewing, running, serving, tooling  # noqa: F401  (each registers its commands)
from autodiscovery.cli.common import app, console, err

__all__ = ["app", "console", "err"]
