"""Run inside an environment with hello-agents (1.0.0 or 1.0.1): what an agent sends, and what training renders.

    python agent_probe.py simple|react [--render TOKENIZER_DIR]

A stub OpenAI server (a local HTTP server) records every request an agent makes while it answers one question with
scripted replies: a calculator call, a call that fails (ReAct: then Finish), then an answer. The same agent is read
by hello_agents_rl.rollouts.agent_spec as training reads it. Prints one JSON line: the requests, and training's
prompt, tool schemas and tool messages for the same calls (tests/test_agent_probe.py compares them). With
--render (transformers installed), also the text `transformers serve` renders for the last request and the text
training's token concatenation gives, with that tokenizer's chat template.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hello_agents import HelloAgentsLLM, ReActAgent, SimpleAgent, ToolRegistry
from hello_agents.core.config import Config
from hello_agents.tools import Tool, ToolErrorCode, ToolParameter, ToolResponse

from hello_agents_rl.rollouts.agent_spec import agent_spec

QUESTION = "What is 347 * 56?"
CALLS = [("calculator", {"expression": "347 * 56"}), ("calculator", {"expression": "1 +"})]


class Calculator(Tool):
    """A tool written with hello-agents' API; a parameter with a default shows how each version writes it."""

    def __init__(self) -> None:
        super().__init__(name="calculator", description="Evaluate an arithmetic expression exactly.")

    def get_parameters(self) -> list:
        return [ToolParameter(name="expression", type="string", description="e.g. 347 * 56"),
                ToolParameter(name="digits", type="integer", description="digits kept", required=False, default=0)]

    def run(self, parameters: dict) -> ToolResponse:
        try:
            return ToolResponse.success(text=str(eval(parameters["expression"], {"__builtins__": {}})))
        except SyntaxError as error:
            return ToolResponse.error(code=ToolErrorCode.INVALID_PARAM, message=f"not an expression: {error.msg}")


def reply(index: int, name: str, arguments: dict) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": f"call_{index}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def stub_server(script: list[dict], requests: list[dict]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            message = script.pop(0)
            self._send({"id": "c", "object": "chat.completion", "created": 0, "model": "m", "usage": {
                "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}, "choices": [{
                    "index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}]})

        def _send(self, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def make_agent(kind: str, base_url: str) -> object:
    registry = ToolRegistry()
    registry.register_tool(Calculator())
    llm = HelloAgentsLLM(model="m", api_key="unused", base_url=base_url, temperature=0)
    config = Config(trace_enabled=False, session_enabled=False)  # 1.0.0 adds its default tools: they are sent too
    if kind == "react":
        return ReActAgent(name="probe", llm=llm, tool_registry=registry, config=config)
    return SimpleAgent(name="probe", llm=llm, system_prompt="Use the calculator.", tool_registry=registry,
                       config=config)


def main() -> None:
    kind = sys.argv[1]
    script = [reply(i, name, args) for i, (name, args) in enumerate(CALLS)]
    script.append(reply(9, "Finish", {"answer": "19432"}) if kind == "react"
                  else {"role": "assistant", "content": "Final Answer: 19432"})
    requests: list[dict] = []
    server = stub_server(script, requests)
    base_url = f"http://127.0.0.1:{server.server_port}/v1"
    answer = make_agent(kind, base_url).run(QUESTION)

    spec = agent_spec(make_agent(kind, base_url))  # read as training reads it; its LLM is never called
    with spec.training():
        tool_messages = [spec.execute(name, args) for name, args in CALLS]
    completion = []
    for (name, args), content in zip(CALLS, tool_messages):
        completion += [{"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": name, "arguments": args}}]},
            {"role": "tool", "name": name, "content": content}]
    if kind == "react":
        completion.append({"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "Finish", "arguments": {"answer": "19432"}}}]})
    else:
        completion.append({"role": "assistant", "content": "Final Answer: 19432"})
    run = spec.as_run(completion)
    out = {"answer": answer, "requests": requests, "prompt": spec.prompt(QUESTION), "tools": [dict(t) for t in spec.tools()],
           "tool_messages": tool_messages, "failed": [m.get("failed", False) for m in run if m["role"] == "tool"],
           "run_answer": run[-1]["content"], "max_tool_turns": spec.max_tool_turns}
    if "--render" in sys.argv:
        out["rendered"] = render(sys.argv[sys.argv.index("--render") + 1], requests[-1], spec, completion)
    print(json.dumps(out, ensure_ascii=False))


def render(tokenizer_dir: str, request: dict, spec: object, completion: list[dict]) -> dict:
    """The last request as `transformers serve` renders it, and training's ids for the same conversation."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer
    from transformers.cli.serving.utils import BaseHandler, Modality
    from trl import GRPOTrainer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    messages = BaseHandler.get_processor_inputs_from_messages(request["messages"], Modality.LLM)  # as serve reads them
    served = tokenizer.apply_chat_template(messages,
                                           tools=request["tools"], add_generation_prompt=True, tokenize=False)
    tools = spec.tools()
    ids = tokenizer.apply_chat_template(spec.prompt(QUESTION), tools=tools, add_generation_prompt=True,
                                        tokenize=True, return_dict=False)
    shim = SimpleNamespace(processing_class=tokenizer, _tokenizer=tokenizer, chat_template=None,
                           chat_template_kwargs={}, _is_vlm=False)
    for message in completion[: 2 * len(CALLS)]:  # the model's call as the template writes it, then TRL's suffix
        if message["role"] == "assistant":
            before = tokenizer.apply_chat_template(spec.prompt(QUESTION), tools=tools, tokenize=True, return_dict=False,
                                                   add_generation_prompt=True)
            turn = tokenizer.apply_chat_template(spec.prompt(QUESTION) + [message], tools=tools, tokenize=True,
                                                 return_dict=False)
            ids += turn[len(before): turn.index(tokenizer.eos_token_id, len(before)) + 1]
        else:
            ids += GRPOTrainer._get_tool_suffix_ids(shim, [message])
    return {"served": served, "trained": tokenizer.decode(ids)}


if __name__ == "__main__":
    main()
