"""The LLM agent: reads the history, states a hypothesis, edits the kernel, learns from the verdicts.

Each proposal is a short conversation: the prompt (task, hardware, incumbent, lineage, recent attempts
with their verdicts), a reply with a hypothesis and edits, and, when the edits do not apply or the
result does not build, precise answers back to the model (a few turns at most). Every request is
logged to the run's llm_calls table.
"""

from __future__ import annotations

import functools
import random
from importlib import resources
from typing import Any

import jinja2

from autodiscovery.agents import History, Proposal, Record
from autodiscovery.agents import edits
from autodiscovery.campaign import Campaign, LlmModel
from autodiscovery.interfaces import AgentBase
from autodiscovery.llm import Call, LlmClient, LlmError
from autodiscovery.store import LlmCall

LOG_LINES = 12  # lines of a compile error or gate failure shown per attempt


def prompts() -> jinja2.Environment:
    folder = resources.files("autodiscovery") / "prompts"
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=True)


def trim(log: str, lines: int = LOG_LINES) -> str:
    keep = [line for line in (log or "").splitlines() if line.strip() and "ptxas info" not in line]
    errors = [line for line in keep if "error" in line.lower()] or keep
    return "\n".join(errors[:lines])


def score_text(r: Record) -> str:
    if r.score is None:
        return ""
    tflops = f", {r.tflops:.1f} TFLOP/s" if r.tflops else ""
    return f"{r.score:.3f}× cuBLAS{tflops}"


class LlmAgent(AgentBase):
    name = "llm"

    def __init__(self, campaign: Campaign) -> None:
        self.campaign = campaign
        self.settings = campaign.agent.llm
        self.batch = self.settings.batch
        self.env = prompts()
        self.rng = random.Random(self.settings.seed)
        self.store = self.run_id = self.harness = None
        self.fingerprint: dict[str, Any] = {}
        self.client = LlmClient(self.settings, self._log)

    # ---- wiring ---------------------------------------------------------------------------------
    def bind(self, store, run_id: int, harness, fingerprint: dict) -> None:
        self.store, self.run_id, self.harness, self.fingerprint = store, run_id, harness, fingerprint
        self.rng = random.Random(f"{self.settings.seed}:{run_id}")

    def preflight(self) -> None:
        self.client.preflight()

    def _log(self, call: Call) -> int | None:
        if self.store is None:
            return None
        with self.store.session() as s:
            row = LlmCall(run_id=self.run_id, **call.__dict__)
            s.add(row)
            s.flush()
            return row.id

    # ---- proposing ------------------------------------------------------------------------------
    def propose(self, history: History, n: int) -> list[Proposal]:
        return [self._one(history) for _ in range(n)]

    def pick(self) -> LlmModel:
        models = self.settings.models
        return self.rng.choices(models, weights=[m.weight for m in models])[0]

    def _one(self, history: History) -> Proposal:
        model = self.pick()
        incumbent = history.incumbent or history.records[0]
        messages = [{"role": "system", "content": self._system()},
                    {"role": "user", "content": self._prompt(history, incumbent)}]
        calls: list[int] = []
        source, hypothesis, failure, rewritten = incumbent.source, "", "", False
        for _turn in range(self.settings.reflections + 1):
            reply, ids = self.client.chat(model, messages)
            calls += [i for i in ids if i is not None]
            parsed = edits.parse(reply)
            rewritten = rewritten or parsed.whole is not None
            hypothesis = parsed.hypothesis or hypothesis
            result = edits.apply(source, parsed)
            source = result.source  # blocks that applied stay applied
            messages.append({"role": "assistant", "content": reply})
            if result.ok:
                failure = ""
                break
            failure = result.message
            messages.append({"role": "user", "content": self.env.get_template("reflect.j2").render(message=failure)})
        proposer = f"llm:{model.name}"
        if failure:
            return Proposal(hypothesis or "(no hypothesis)", "", proposer, rejected=f"no usable edit: {failure}",
                            llm_calls=calls)
        source = self._repair(model, messages, source, calls)
        # An edit keeps the incumbent's family; a whole new kernel is a rewrite, whatever it was made from.
        return Proposal(hypothesis or "(no hypothesis stated)", source, proposer,
                        family="rewrite" if rewritten else incumbent.family, llm_calls=calls,
                        parent_seq=incumbent.seq)

    def _repair(self, model: LlmModel, messages: list[dict], source: str, calls: list[int]) -> str:
        """Give a candidate that does not build (or declares a bad launch) a turn to fix itself."""
        if self.harness is None:
            return source
        for _turn in range(self.settings.repair_turns):
            problem = self._build_problem(source)
            if not problem:
                return source
            messages.append({"role": "user", "content": self.env.get_template("repair.j2").render(log=problem)})
            reply, ids = self.client.chat(model, messages)
            calls += [i for i in ids if i is not None]
            messages.append({"role": "assistant", "content": reply})
            result = edits.apply(source, edits.parse(reply))
            if result.ok:
                source = result.source
        return source

    def _build_problem(self, source: str) -> str:
        try:
            self.harness.check(source)
        except Exception as exc:  # a manifest the harness refuses
            return str(exc)
        build = self.harness.build(source)
        return "" if build.ok else trim(build.log, 30)

    # ---- prompts --------------------------------------------------------------------------------
    def _facts(self) -> dict:
        p, fp = self.campaign.problem, self.fingerprint
        return {"gpu": fp.get("gpu", "NVIDIA H100/H200"), "cc": fp.get("cc", "9.0"), "sms": fp.get("sms", 132),
                "l2_bytes": fp.get("l2_bytes", 50 * 2**20), "M": p.M, "N": p.N, "K": p.K,
                **self.harness.prompt_facts()}

    def _system(self) -> str:
        return self.env.get_template("system.j2").render(**self._facts())

    def _prompt(self, history: History, incumbent: Record) -> str:
        lineage = [r for r in history.records if r.kept or r.seq == 0]
        attempts = [r for r in history.records if r.seq != 0][-self.settings.attempts_shown:]
        cublas = [r.tflops / r.score for r in history.records if r.tflops and r.score]

        def render() -> str:
            return self.env.get_template("propose.j2").render(**{
                **self._facts(),
                "incumbent": incumbent, "incumbent_score": score_text(incumbent) or "not measured",
                "lineage": [{"seq": r.seq, "hypothesis": r.hypothesis, "score_text": score_text(r) or r.status}
                            for r in lineage],
                "attempts": [{"seq": r.seq, "status": r.status, "score_text": score_text(r), "build": _facts(r),
                              "hypothesis": r.hypothesis, "log": trim(r.log) if r.score is None else ""}
                             for r in attempts],
                "cublas_tflops": f"{sorted(cublas)[len(cublas) // 2]:.0f}" if cublas else "775",
            })

        text = render()
        if self.settings.context_tokens is None:
            return text
        room = self.settings.context_tokens - self.settings.max_tokens - tokens(self._system())
        while tokens(text) > room and (attempts or len(lineage) > 1):
            if attempts:
                attempts = attempts[1:]  # the oldest attempt first
            else:
                lineage = lineage[1:]  # then the oldest steps of the lineage; the incumbent stays
            text = render()
        if tokens(text) > room:
            raise LlmError(f"the prompt needs about {tokens(text)} tokens with the rules and the incumbent alone, "
                           f"more than agent.llm.context_tokens ({self.settings.context_tokens}) less max_tokens "
                           f"({self.settings.max_tokens}) leaves")
        return text


def tokens(text: str) -> int:
    """Tokens in `text`: counted with tiktoken where it is installed (and its tables are at hand), else
    estimated (3.5 characters a token, on the high side for code)."""
    encoding = _encoding()
    return len(encoding.encode(text)) if encoding is not None else int(len(text) / 3.5) + 1


@functools.lru_cache(maxsize=1)
def _encoding():
    """Looked up once a process: fitting a prompt counts it again after every cut."""
    try:
        import tiktoken

        return tiktoken.get_encoding("o200k_base")
    except Exception:
        return None


def _facts(r: Record) -> dict:
    return {"registers": r.build.get("registers"), "spill_stores": r.build.get("spill_stores")}
