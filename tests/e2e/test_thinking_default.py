"""The profiles' llama-server answers any OpenAI-style client in `content` (issue 40 item 3).

Boxmaker's templates open <think> when enable_thinking is true, which llama-server assumes with
--reasoning-format deepseek; a client that does not send `chat_template_kwargs` (a stock OpenAI
client) got "" as content on every task. The server here is started with the very command line
of conf/programs/llama-server.conf (what `make run` and `make verify-device` run), on SmolLM2,
under each profile's template; the request is a plain one, as such a client sends it.
"""

from __future__ import annotations

import configparser
import shlex
import subprocess
import tempfile
from pathlib import Path

import orjson
import pytest

from boxmaker.verify.stack import free_port, healthy
from tests.support import rawhttp
from tests.support.llama import ensure_built
from tests.support.procs import wait_for

REPO = Path(__file__).resolve().parents[2]
PROGRAM = REPO / "conf" / "programs" / "llama-server.conf"
BOUND = 120.0  # seconds for the small model to load on a loaded 2-core machine


def shipped_argv(env: dict[str, str]) -> list[str]:
    """llama-server's command line as supervisord makes it from the shipped program file."""
    parser = configparser.RawConfigParser()
    parser.read(PROGRAM)
    command = parser.get("program:llama-server", "command")
    return shlex.split(command % {f"ENV_{k}": v for k, v in env.items()})


@pytest.mark.parametrize("template", ["chatml-tools.jinja", "chatml-tools-json.jinja"])
def test_a_plain_openai_request_gets_a_non_empty_answer(template: str) -> None:
    built = ensure_built()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bx-think-") as run:
        argv = shipped_argv({
            "BOXMAKER_LLAMA_SERVER": str(built.binary), "BOXMAKER_MODEL": str(built.model),
            "BOXMAKER_ALIAS": "m", "BOXMAKER_TEMPLATE": str(REPO / "conf" / "templates" / template),
            "BOXMAKER_LLAMA_CTX": "2048", "BOXMAKER_LLAMA_SLOTS": "1",
            "BOXMAKER_LLAMA_THREADS": "1", "BOXMAKER_LLAMA_PORT": str(port), "BOXMAKER_RUN": run,
        })  # fmt: skip
        (Path(run) / "slots").mkdir()
        with open(Path(run) / "llama-server.log", "wb") as log:
            server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: healthy("127.0.0.1", port) or server.poll() is not None,
                     "llama-server to load its model", BOUND, interval=0.2)  # fmt: skip
            assert server.poll() is None, (Path(run) / "llama-server.log").read_text()[-2000:]
            plain = {"messages": [{"role": "user", "content": "What is the capital of France?"}],
                     "max_tokens": 24}  # fmt: skip
            resp = rawhttp.call("127.0.0.1", port, "POST", "/v1/chat/completions", plain, BOUND)
            assert resp.status == 200, resp.body
            message = orjson.loads(resp.body)["choices"][0]["message"]
            assert (message.get("content") or "").strip(), message
            assert not message.get("reasoning_content"), message
        finally:
            server.terminate()
            server.wait(BOUND)
