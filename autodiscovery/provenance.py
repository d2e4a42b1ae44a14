"""The code a run ran, recorded in its fingerprint (`code`): the project's version, a digest of its source
(the package, the harnesses, the search spaces and the seeds: the same digest wherever the same code
runs, a checkout or a copy of one), and, where the project is a git checkout, its commit and whether the
tree had uncommitted changes to tracked files. `replay` and `run --resume` compare them."""

from __future__ import annotations

import functools
import hashlib
import subprocess

from autodiscovery import ROOT, __version__

SOURCES = ("autodiscovery", "harnesses", "search_spaces", "seeds")
"""The folders whose files are the code a run runs (beside the candidates, recorded whole)."""
SKIPPED = ("__pycache__", ".pyc", ".egg-info")


@functools.cache
def source_digest() -> str:
    """The first 16 hex digits of a SHA-256 over every source file's path and bytes, in path order."""
    h = hashlib.sha256()
    for folder in SOURCES:
        base = ROOT / folder
        if not base.is_dir():
            continue
        for path in sorted(p for p in base.rglob("*") if p.is_file() and not any(s in str(p) for s in SKIPPED)):
            h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def code() -> dict:
    """What the fingerprint records of the code: version, source digest, and commit and `dirty` (None
    where the project is not a git checkout, or git is not there)."""
    commit = _git("rev-parse", "HEAD") if (ROOT / ".git").exists() else None
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"version": __version__, "source": source_digest(), "commit": commit.strip() if commit else None,
            "dirty": bool(status.strip()) if status is not None else None}


def stamped(fingerprint: dict) -> dict:
    """A new run's fingerprint with the code it runs (`code`)."""
    return fingerprint | {"code": code()}


def short(recorded: dict | None) -> str | None:
    """A fingerprint's `code` as a run's header says it: 'code 1a2b3c4'; 'code 1a2b3c4+ (source 5d6e7f80)'
    where the tree had uncommitted changes (the commit alone does not say what ran: the source digest
    does); 'source 5d6e7f80' where no commit was recorded; None where no code was recorded."""
    if not recorded:
        return None
    if recorded.get("commit"):
        dirty = f"+ (source {str(recorded.get('source', '?'))[:8]})" if recorded.get("dirty") else ""
        return f"code {recorded['commit'][:7]}{dirty}"
    return f"source {str(recorded.get('source', '?'))[:8]}"


def describe(recorded: dict | None) -> str:
    """A fingerprint's `code` in words: 'autodiscovery 0.1.0 at 1a2b3c4 (uncommitted changes), source
    5d6e…'; 'code not recorded' for a run recorded before runs recorded it."""
    if not recorded:
        return "code not recorded"
    at = f" at {recorded['commit'][:7]}" if recorded.get("commit") else ""
    dirty = " (uncommitted changes)" if recorded.get("dirty") else ""
    return f"autodiscovery {recorded.get('version', '?')}{at}{dirty}, source {str(recorded.get('source', '?'))[:8]}"


def differs(recorded: dict | None, now: dict) -> str | None:
    """How the code of `now` differs from a run's recorded code, in words, or None where it is the same
    (the same source digest) or was not recorded."""
    if not recorded or recorded.get("source") == now.get("source"):
        return None
    return f"the run was measured with {describe(recorded)}; this is {describe(now)}"
