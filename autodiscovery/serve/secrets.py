"""What no page or response of `serve` may carry: the database's password, the API keys of this
machine's environment, and anything shaped like a key or a URL's password, whatever recorded it."""

from __future__ import annotations

import html
import json
import os
import re

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

MIN_SECRET = 6
"""A shorter literal is not searched for (it would blank ordinary words); the same bar as the LLM client's."""
NAMED = re.compile(r"KEY|TOKEN|SECRET|PASSW", re.I)
"""Environment variables whose values are secrets (OPENAI_API_KEY, HF_TOKEN, PGPASSWORD, ...)."""
SHAPED = [
    (re.compile(r"(?<=://)([^\s:/@'\"<>]+):[^\s/@'\"<>]+@"), r"\1:***@"),  # scheme://user:password@host
    (re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_\-]{16,}"), "[redacted key]"),  # OpenAI, Anthropic, ... keys
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/\-]{12,}=*"), r"\1[redacted]"),
]


class Redactor:
    """Replaces every secret it knows of in a text, in any of the forms a page may hold it: as is,
    escaped for HTML, escaped inside a JSON string."""

    def __init__(self, db_url: str, environ: dict[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        found = {value for name, value in env.items() if NAMED.search(name) and len(value) >= MIN_SECRET}
        try:
            password = make_url(db_url).password
        except ArgumentError:
            password = None
        if password and len(str(password)) >= MIN_SECRET:
            found.add(str(password))
        forms = {form for s in found for form in (s, html.escape(s), html.escape(s, quote=False), json.dumps(s)[1:-1])}
        self.literal = re.compile("|".join(map(re.escape, sorted(forms, key=len, reverse=True)))) if forms else None

    def __call__(self, text: str) -> str:
        if self.literal is not None:
            text = self.literal.sub("[redacted]", text)
        for pattern, replacement in SHAPED:
            text = pattern.sub(replacement, text)
        return text
