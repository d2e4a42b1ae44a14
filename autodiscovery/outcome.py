"""What a harness reports for one evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Outcome:
    status: str  # ok | compile_error | incorrect | timeout | crashed | rejected
    metrics: dict = field(default_factory=dict)
    log: str = ""
    seconds: float = 0.0
    device: str = ""

    @property
    def score(self) -> float | None:
        """The number the loop maximizes: the median paired ratio against the reference (× cuBLAS)."""
        return self.metrics.get("ratio", {}).get("median") if self.status == "ok" else None
