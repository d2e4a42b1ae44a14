"""A recorded suite as the documentation shows it: a Markdown table of its problems and the line that
sums them up, rendered from its database by `docgen` (a page's figure cannot drift from the database it
names: `python -m autodiscovery.docgen --check` fails where it does)."""

from __future__ import annotations

from autodiscovery.interfaces import columns
from autodiscovery.review.display import fmt, summary_text


def suite_table(data: dict) -> str:
    """`exports.dispatch` as Markdown: each problem, its best (the objective and the harness's suite
    figures, unrounded in the data, three places here), its kernel, the candidates it measured and how
    many a minute, and how soon it first kept one at or past the baseline; then the summary."""
    harness = data["harness"]
    objective = harness.objective
    shown = {k for r in data["rows"] for k, v in r["figures"].items() if v is not None}
    before = [c for c in columns(harness, "suite", False) if c.key in shown]
    after = [c for c in columns(harness, "suite", True) if c.key in shown]
    way = "≥" if objective.higher_is_better else "≤"
    heads = ["problem", "shape", *(c.label for c in before), objective.name, *(c.label for c in after),
             "kernel", "candidates", "a minute", f"first {way} {objective.reference:g} (s)"]
    lines = ["| " + " | ".join(heads) + " |", "|" + " --- |" * len(heads)]
    for r in data["rows"]:
        kernel = f"{r['family']} #{r['best_seq']}" if r["score"] is not None else (r["stop_reason"] or r["status"])
        cells = [r["label"], r["shape"], *(c.text(r["figures"].get(c.key)) for c in before),
                 fmt(r["score"], objective.spec), *(c.text(r["figures"].get(c.key)) for c in after), kernel,
                 str(r["evaluated"]), fmt(r["per_minute"], ".0f"), fmt(r["first_at_s"], ".0f")]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    said = summary_text(data["summary"], objective)
    return "\n".join(lines) + (f"\n\nOver the {data['summary']['problems']} problems: {said}." if said else "") + "\n"
