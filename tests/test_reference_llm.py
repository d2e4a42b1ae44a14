"""The LLM agent on a reference campaign, against the scripted OpenAI-compatible server (real HTTP, the
real client, real nvcc builds; a dry run, so no GPU and no PyTorch): the prompt carries the user's module
and the manifest's rules, an edit that changes the launch shape builds, and a manifest the harness refuses
goes back to the model as a build failure that it repairs."""

from __future__ import annotations

import json

from conftest import needs_nvcc
from llm_server import ScriptedServer, edit_lines, say
from typer.testing import CliRunner

from autodiscovery.cli import app

cli = CliRunner()

WIDER = edit_lines("64 threads per block halve the number of blocks",
                   lambda s: s.replace("cdiv(batch_size, 32)", "cdiv(batch_size, 64)")
                   .replace("block: [32, 1, 1]", "block: [64, 1, 1]"))
HUGE = edit_lines("one block per 2048 rows", lambda s: s.replace("block: [32, 1, 1]", "block: [2048, 1, 1]"))
LEGAL = say("Hypothesis: a block holds at most 1024 threads; take 128.\n\n<<<<<<< SEARCH\n    block: [2048, 1, 1]\n"
            "=======\n    block: [128, 1, 1]\n>>>>>>> REPLACE\n")


@needs_nvcc
def test_the_llm_agent_changes_a_reference_kernel_and_repairs_its_manifest(tmp_path):
    db = tmp_path / "softmax.db"
    with ScriptedServer([WIDER, HUGE, LEGAL]) as server:
        res = cli.invoke(app, ["run", "--campaign", "softmax", "--model", "scripted", "--base-url", server.url,
                               "--dry-run", "--db", str(db), "--quiet", "--set", "agent.llm.concurrency=1",
                               "--set", "agent.llm.overlap=false", "--set", "budget.candidates=3",
                               "--set", f"harness.cache_dir={tmp_path / 'cache'}"], env={"OPENAI_API_KEY": "k"})
        requests = server.requests
    assert res.exit_code == 0, res.output
    assert "3 candidates built" in res.output

    system, user = (m["content"] for m in requests[0]["messages"][:2])
    assert "class Model(nn.Module)" in system and "torch.softmax(x, dim=-1)" in system
    assert "batch_size = 4096, dim = 16384" in system and "/* @manifest" in system
    assert "extern \"C\" __global__ void softmax_naive" in user

    cands = json.loads(cli.invoke(app, ["show", "1", "--json", "--db", str(db)]).output)["candidates"]
    assert [(c["status"], c["proposer"]) for c in cands] == [("built", "seed"), ("built", "llm:scripted"),
                                                            ("built", "llm:scripted")]
    assert "block: [64, 1, 1]" in cands[1]["source"] and "cdiv(batch_size, 64)" in cands[1]["source"]
    assert "block: [128, 1, 1]" in cands[2]["source"] and "2048" not in cands[2]["source"]

    assert len(requests) == 3  # two proposals, one repair
    told = requests[2]["messages"][-1]["content"]
    assert "does not build" in told and "a block of 2048 threads (at most 1024)" in told


FEWER_WARPS = edit_lines("8 warps a row leave more registers a thread for the row's values",
                         lambda s: s.replace("num_warps: 16", "num_warps: 8"))
ESCAPE = edit_lines("three stages over the rows, their count read from the environment",
                    lambda s: s.replace("import triton\n", "import os\nimport triton\n", 1)
                    .replace("num_stages: 2", "num_stages: 3"))
PLAIN = say("Hypothesis: the host is out of reach; keep the imports Triton needs.\n\n<<<<<<< SEARCH\nimport os\n"
            "import triton\n=======\nimport triton\n>>>>>>> REPLACE\n")


def test_the_llm_agent_changes_a_triton_kernel_and_a_host_import_goes_back_to_it(tmp_path):
    """A campaign whose candidates are Triton alone: the prompt is written for Triton and shows the kernel
    as Python; an edit of its launch options builds; an edit that imports `os` is refused by the static
    rule before anything runs, and goes back to the model, which takes it out."""
    db = tmp_path / "softmax.db"
    with ScriptedServer([FEWER_WARPS, ESCAPE, PLAIN]) as server:
        res = cli.invoke(app, ["run", "--campaign", "softmax", "--model", "scripted", "--base-url", server.url,
                               "--dry-run", "--db", str(db), "--quiet", "--set", "agent.llm.concurrency=1",
                               "--set", "agent.llm.overlap=false", "--set", "budget.candidates=3",
                               "--set", "seed=softmax/triton.py", "--set", "harness.languages=[triton]",
                               "--set", f"harness.cache_dir={tmp_path / 'cache'}"], env={"OPENAI_API_KEY": "k"})
        requests = server.requests
    assert res.exit_code == 0, res.output
    system, user = (m["content"] for m in requests[0]["messages"][:2])
    assert "writing Triton kernels" in system and "The kernels are written in Triton" in system
    assert "```python\n\"\"\"@manifest" in user and "```cuda" not in user

    cands = json.loads(cli.invoke(app, ["show", "1", "--json", "--db", str(db)]).output)["candidates"]
    assert [(c["status"], c["proposer"]) for c in cands] == [("built", "seed"), ("built", "llm:scripted"),
                                                            ("built", "llm:scripted")]
    assert "num_warps: 8" in cands[1]["source"]
    assert "import os" not in cands[2]["source"] and "num_stages: 3" in cands[2]["source"]
    assert len(requests) == 3  # two proposals, one repair
    told = requests[2]["messages"][-1]["content"]
    assert "import os: a Triton candidate is device code only" in told
