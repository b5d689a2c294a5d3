"""The LLM agent: system prompt = instructions + domain policy, tools from the domain's toolkit.

As τ²-bench's ``LLMAgent``: it sees the whole trajectory (user messages, its own
messages and tool calls, tool results) and answers with either a text message or
tool call(s). ``###STOP###`` in its text ends the simulation (``agent_stop``).

Styles: ``"tau2"`` leaves every turn to the model (``tool_choice`` auto). ``"tiny"``
(for the embedded 135M model, which practically never starts a tool call on its own)
makes the agent's *first* turn a tool call (``tool_choice="required"``: the llm layer
constrains it to a valid call of one of the tools, the model picks which and with what
arguments); every later turn is the model's free choice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

AGENT_STOP = "###STOP###"

# Short on purpose: the embedded model has 135M parameters and an 8k context, and the
# tool list (added by the llm layer) already takes a few hundred tokens.
AGENT_INSTRUCTION = """You are a customer service agent of an online bookshop. Follow the policy below.
Each turn, either call one tool or write one short message to the customer, never both.
Look facts up with a tool before you answer. Never make up facts.""".strip()

SYSTEM_PROMPT = """<instructions>
{agent_instruction}
</instructions>
<policy>
{domain_policy}
</policy>""".strip()


def agent_visible(message: dict[str, Any]) -> dict[str, Any]:
    """A trajectory message as the agent's LLM gets it (τ² keys only; no raw data or timestamps)."""
    role = message["role"]
    if role == "tool":
        return {"role": "tool", "id": message.get("id") or "", "content": message.get("content") or ""}
    out = {"role": role, "content": message.get("content")}
    if message.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c.get("id") or "", "name": c["name"],
             "arguments": c["arguments"] if isinstance(c.get("arguments"), dict) else {},
             "requestor": c.get("requestor", "assistant")}
            for c in message["tool_calls"]
        ]
    return out


@dataclass
class LLMAgent:
    llm: str
    policy: str
    tools: list[dict[str, Any]]
    instructions: str = AGENT_INSTRUCTION
    max_tokens: int = 128
    temperature: float = 0.0
    top_logprobs: int = 5
    llm_args: dict[str, Any] = field(default_factory=dict)
    style: str = "tau2"

    def __post_init__(self) -> None:
        if self.style not in ("tiny", "tau2"):
            raise ValueError(f"agent style must be 'tiny' or 'tau2', got {self.style!r}")

    def tool_choice(self, first_turn: bool) -> str | None:
        return "required" if (self.style == "tiny" and first_turn and self.tools) else None

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT.format(agent_instruction=self.instructions, domain_policy=self.policy)

    def build_messages(self, trajectory: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"role": "system", "content": self.system_prompt}] + [agent_visible(m) for m in trajectory]

    def generate(self, trajectory: list[dict[str, Any]], seed: int | None, retry: Any = None,
                 first_turn: bool = False):
        from agentuq_nb import llm

        return llm.generate(
            self.build_messages(trajectory),
            model=self.llm,
            tools=self.tools,
            tool_choice=self.tool_choice(first_turn),
            top_logprobs=self.top_logprobs,
            temperature=self.temperature,
            seed=seed,
            max_tokens=self.max_tokens,
            retry=retry,
            **self.llm_args,
        )

    @staticmethod
    def is_stop(message: dict[str, Any]) -> bool:
        return bool(message.get("content")) and AGENT_STOP in message["content"]
