"""Agents propose candidates; the loop builds, gates, measures and keeps or reverts them.

What an agent must offer, and the types that pass through it (`Proposal`, `Record`, `History`), are in
`autodiscovery.interfaces`. Here: the search agent (`search`, over a `space` of kernel families with
`tpe`), the LLM agent (`llm`, with its `client`, `prompting`, `programs` and `edits`).
"""
