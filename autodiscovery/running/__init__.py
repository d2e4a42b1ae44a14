"""Running a campaign: the loop, its ledger and decisions, the lease, evaluations, executors, and the
entry points (start, resume, measure, profile, prompt, ladder)."""
