"""Reviewing what runs recorded: read-only views of the store, Rich tables, the HTML report, replay."""
