"""What harnesses build on: builds and their cache, ptxas facts, child processes, paired statistics,
the candidate sandbox, launch expressions, small text helpers."""
