"""A scripted OpenAI-compatible server on 127.0.0.1, for testing the LLM agent over real HTTP."""

from __future__ import annotations

import difflib
import json
import re
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from autodiscovery.agents.prompting import tokens

Step = dict | Callable[[dict], dict]


def say(content: str, prompt_tokens: int = 1000, completion_tokens: int = 200, reasoning: str | None = None,
        delay: float = 0.0) -> dict:
    """A reply; `reasoning` comes back as `reasoning_content` (as vLLM's reasoning parsers and DeepSeek
    return it), `delay` holds the answer back that long (a model thinking)."""
    return {"status": 200, "content": content, "usage": (prompt_tokens, completion_tokens), "reasoning": reasoning,
            "delay": delay}


def kernel_of(body: dict) -> str:
    """The kernel a proposal's request asks to change (the first block of its user message fenced as
    CUDA, or as Python for a Triton file)."""
    return re.split(r"```(?:cuda|python)\n", body["messages"][1]["content"], maxsplit=1)[1].split("\n```", 1)[0]


def edit_lines(hypothesis: str, change: Callable[[str], str], delay: float = 0.0) -> Callable[[dict], dict]:
    """A reply that changes whatever kernel the request asks to change, as a model would: `change` maps
    its text to the new text, and each changed run of lines becomes one SEARCH/REPLACE block."""
    def step(body: dict) -> dict:
        old = kernel_of(body).splitlines()
        new = change("\n".join(old)).splitlines()
        blocks = []
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
            if tag == "equal":
                continue
            if i1 == i2 == 0:  # an insertion at the top is anchored on the first line
                search, replace = old[:1], new[j1:j2] + old[:1]
            else:  # an insertion elsewhere on the line before it
                at = i1 - 1 if i1 == i2 else i1
                search, replace = old[at:i2], old[at:i1] + new[j1:j2]
            blocks.append("<<<<<<< SEARCH\n" + "\n".join(search) + "\n=======\n" + "\n".join(replace)
                          + "\n>>>>>>> REPLACE")
        return say(f"Hypothesis: {hypothesis}\n\n" + "\n".join(blocks) + "\n", delay=delay)
    return step


def fail(status: int, message: str = "scripted failure") -> dict:
    return {"status": status, "error": message}


def stall(seconds: float) -> dict:
    return {"sleep": seconds}


class Quiet(ThreadingHTTPServer):
    """A client that gave up on a request (its timeout) closes the socket before the answer: that is the
    scripted behaviour, not an error, and a traceback on stderr would land in a CliRunner's output."""

    def handle_error(self, request, client_address) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class ScriptedServer:
    """Answers /v1/models with `models`, and each chat completion with the next step of `script`."""

    def __init__(self, script: list[Step], models: tuple[str, ...] = ("scripted",), key: str | None = None,
                 refuses: dict[str, dict[str, str]] | None = None, context: int | None = None,
                 ping_script: list[dict] = ()) -> None:
        self.script = list(script)
        self.ping_script = list(ping_script)
        """How the preflight's pings are answered, one step each (`fail(...)`), before they are answered OK."""
        self.context = context
        """A context window in tokens (counted as the agent counts them: a tokenizer where one is
        installed): a request whose messages and output limit need more is answered 400, as vLLM does."""
        self.times: list[tuple[float, float]] = []
        """(arrived, answered) of each scripted request, by time.monotonic()."""
        self.lock = threading.Lock()
        self.refuses = refuses or {}
        """model -> {parameter: what to use instead}: answered 400 as OpenAI answers its reasoning models."""
        self.models = models
        self.key = key
        self.requests: list[dict] = []
        self.pings: list[dict] = []
        """The preflight's one tiny request per model, answered OK without taking a step of the script."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if server.key and self.headers.get("Authorization") != f"Bearer {server.key}":
                    self._send(401, {"error": {"message": "invalid api key", "type": "invalid_request_error"}})
                    return False
                return True

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in server.models]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                if not self._authorized():
                    return
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                ping = body.get("messages", [{}])[-1].get("content") == "Reply with OK."  # the preflight's
                arrived = time.monotonic()
                with server.lock:
                    (server.pings if ping else server.requests).append(body)
                for param, instead in server.refuses.get(body.get("model"), {}).items():
                    if param in body:
                        return self._send(400, {"error": {
                            "message": f"Unsupported parameter: '{param}' is not supported with this model. "
                                       f"Use '{instead}' instead." if instead else
                                       f"Unsupported value: '{param}' does not support this value with this model.",
                            "type": "invalid_request_error", "param": param, "code": "unsupported_parameter"}})
                if ping:
                    with server.lock:
                        step = server.ping_script.pop(0) if server.ping_script else None
                    if step is not None:
                        return self._send(step["status"], {"error": {"message": step["error"], "type": "server_error"}})
                    return self._send(200, {
                        "id": "chatcmpl-ping", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "OK"}}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})
                if server.context is not None:
                    need = sum(tokens(m.get("content") or "") + 4 for m in body["messages"]) + \
                        (body.get("max_tokens") or body.get("max_completion_tokens") or 0)
                    if need > server.context:
                        return self._send(400, {"error": {
                            "message": f"This model's maximum context length is {server.context} tokens. However, "
                                       f"you requested {need:.0f} tokens. Please reduce the length of the messages "
                                       "or completion.", "type": "BadRequestError", "param": None, "code": 400}})
                with server.lock:
                    step = server.script.pop(0) if server.script else fail(500, "script exhausted")
                if callable(step):
                    step = step(body)
                if step.get("delay"):
                    time.sleep(step["delay"])
                if "sleep" in step:
                    time.sleep(step["sleep"])
                    return self._send(500, {"error": {"message": "slept"}})
                if step["status"] != 200:
                    return self._send(step["status"], {"error": {"message": step["error"], "type": "server_error"}})
                pin, pout = step["usage"]
                message = {"role": "assistant", "content": step["content"]}
                if step.get("reasoning") is not None:
                    message["reasoning_content"] = step["reasoning"]
                with server.lock:
                    server.times.append((arrived, time.monotonic()))
                self._send(200, {
                    "id": f"chatcmpl-{len(server.requests)}", "object": "chat.completion", "created": 0,
                    "model": body["model"], "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                    "usage": {"prompt_tokens": pin, "completion_tokens": pout, "total_tokens": pin + pout},
                })

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
