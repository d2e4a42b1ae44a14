"""Harnesses evaluate candidates: build, check, measure, each in a folder of its own.

A harness package exports its class (its roles: `autodiscovery.roles`), which names its settings
model (`Settings`, the campaign's `harness:` section) and its objective; `autodiscovery.registry` maps
the names of those that ship.
"""
