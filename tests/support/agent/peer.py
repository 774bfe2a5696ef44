"""The stock-framework floor of `make agent-tasks` (issue 40.1): LangChain's `create_agent` over
`ChatOpenAI`, with `pip install -e '.[agent-peer]'`; without LangChain, a minimal OpenAI-client
tool loop (`--peer openai`). Never imported by boxmaker.

Same server, same model, same everything the model sees: the llama-server the stack started
(its HTTP port), the system text and tools array Boxmaker's next session would get (assembled as
loopd does, from its config and brokerd's `list`), loopd's sampling (temperature, seed,
max_tokens) and `enable_thinking: false`. Tools run where Boxmaker's run: brokerd, on the
stack's broker.sock, under the peer's own session id, each approval answered on owner.sock from
the task's `approve` lines. `clock` is the time; `find_tool`/`call_tool` are answered by loopd's
own registry rules (what Boxmaker answers); `recall` has nothing to recall. No nudge, no repeat
rule: what the framework does by itself.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import orjson

from boxmaker._client.owner import OwnerClient
from boxmaker.loopd.config import Config, load_config
from boxmaker.loopd.tools.port import BrokerPort, baseline_tools, broker_registry, clock_now
from boxmaker.loopd.tools.registry import Answer, resolve
from boxmaker.proto import ToolCall, ToolRequest
from boxmaker.session.baseline import Baseline, assemble_baseline
from boxmaker.verify.device import Run
from tests.support.agent.tasks import Call, Outcome, Task

ROUNDS = 8  # loopd's tool_iterations: a turn gets as many model rounds with calls


class PeerTools:
    """The tools the peer's model calls, run through brokerd under `session`."""

    def __init__(self, run: Run, config: Config, session: str, answers: tuple[str, ...]) -> None:
        self._owner = run.stack.owner_sock
        self._answers = list(answers)
        self._port = BrokerPort(
            str(run.stack.broker_sock), 300.0, self._approve, session,
            call_timeout_s=config.loop.tool_timeout_ms / 1000,
        )  # fmt: skip
        self._registry = broker_registry(self._port.tools() or (), config.tools.core)
        self._n = itertools.count()
        self.calls: list[Call] = []

    def _approve(self, call_id: str, _tool: str, _summary: str) -> None:
        answer = self._answers.pop(0) if self._answers else "no"
        with OwnerClient(self._owner) as owner:
            held = owner.claim(call_id)
            owner.answer(call_id, held.hash, answer)

    def run(self, name: str, arguments: dict[str, Any]) -> str:
        text = orjson.dumps(arguments).decode()
        n = next(self._n)
        if name == "clock":
            content = clock_now()  # what loopd and brokerd answer
        elif name == "recall":
            content = "nothing to recall"
        else:
            got = resolve(ToolCall(f"peer-{n}", name, text), self._registry)
            if isinstance(got, Answer):
                content = got.content
            else:
                content = self._port.call(ToolRequest(n, got.tool, got.arguments)).content
        inner = arguments.get("arguments") if name == "call_tool" else None
        tool = str(arguments.get("name")) if isinstance(inner, dict) else name
        self.calls.append(Call(tool, inner if isinstance(inner, dict) else arguments, content))
        return content


def baseline(run: Run) -> tuple[Config, Baseline]:
    """Boxmaker's config on this stack and the baseline its next new session gets."""
    config = load_config(run.stack.config_path)
    tools = baseline_tools(config.tools)
    return config, assemble_baseline(config.baseline.system, config.paths.home, tools)


def _sampling(config: Config) -> dict[str, Any]:
    s = config.inference.sampling
    return {"temperature": s.temperature, "seed": s.seed, "max_tokens": config.inference.max_tokens}


def langchain_peer(run: Run) -> Callable[[Task, list[str], str, Outcome], None]:
    """LangChain's `create_agent` over ChatOpenAI on the stack's llama-server."""
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import StructuredTool
    from langchain_openai import ChatOpenAI

    def task_run(task: Task, turns: list[str], session: str, outcome: Outcome) -> None:
        config, base = baseline(run)
        tools = PeerTools(run, config, session, task.approve)
        options: dict[str, Any] = {
            "base_url": f"http://{run.stack.env['BOXMAKER_UPSTREAM']}/v1",
            "api_key": "none",
            "model": config.inference.model,
            "timeout": 900,
            "extra_body": {"chat_template_kwargs": {"enable_thinking": False}},
            **_sampling(config),
        }
        model = ChatOpenAI(**options)

        def tool_of(name: str, description: str, schema: dict[str, Any]) -> StructuredTool:
            def func(**kwargs: Any) -> str:
                return tools.run(name, kwargs)

            return StructuredTool(name=name, description=description, args_schema=schema,
                                  func=func)  # fmt: skip

        agent = create_agent(
            model, [tool_of(t.name, t.description, t.parameters) for t in base.tools],
            system_prompt=base.system,
        )  # fmt: skip
        messages: list[Any] = []
        for text in turns:
            try:
                state = agent.invoke(
                    {"messages": [*messages, HumanMessage(text)]},
                    {"recursion_limit": 2 * ROUNDS + 1},
                )
            except Exception as exc:  # the framework's own end (its recursion limit)
                outcome.answers.append("")
                outcome.errors.append(f"{type(exc).__name__}: {str(exc)[:120]}")
                messages.append(HumanMessage(text))
                continue
            messages = list(state["messages"])
            last = messages[-1]
            outcome.answers.append(str(last.content) if not getattr(last, "tool_calls", None)
                                   else "")  # fmt: skip
        outcome.calls = tools.calls

    return task_run


def openai_peer(run: Run) -> Callable[[Task, list[str], str, Outcome], None]:
    """The minimal OpenAI-client tool loop: ask, run every call, ask again, ROUNDS at most."""
    from openai import OpenAI

    def task_run(task: Task, turns: list[str], session: str, outcome: Outcome) -> None:
        config, base = baseline(run)
        tools = PeerTools(run, config, session, task.approve)
        client = OpenAI(base_url=f"http://{run.stack.env['BOXMAKER_UPSTREAM']}/v1",
                        api_key="none", timeout=900)  # fmt: skip
        schemas: list[Any] = [
            {"type": "function",
             "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in base.tools
        ]  # fmt: skip
        messages: list[Any] = [{"role": "system", "content": base.system}]
        for text in turns:
            messages.append({"role": "user", "content": text})
            answer = ""
            for _ in range(ROUNDS + 1):
                reply = client.chat.completions.create(
                    model=config.inference.model, messages=messages, tools=schemas,
                    extra_body={"chat_template_kwargs": {"enable_thinking": False}},
                    **_sampling(config),
                ).choices[0].message  # fmt: skip
                messages.append(reply.model_dump(exclude_none=True))
                if not reply.tool_calls:
                    answer = reply.content or ""
                    break
                calls: list[Any] = list(reply.tool_calls)
                for c in calls:
                    try:
                        args = orjson.loads(c.function.arguments or "{}")
                    except orjson.JSONDecodeError:
                        args = {}
                    content = tools.run(c.function.name, args if isinstance(args, dict) else {})
                    messages.append({"role": "tool", "tool_call_id": c.id, "content": content})
            outcome.answers.append(answer)
        outcome.calls = tools.calls

    return task_run
