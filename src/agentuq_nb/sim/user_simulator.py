"""The LLM user simulator: a scenario, a role-flipped history, and stop tokens.

As in τ²-bench, the simulator is an LLM whose *own* messages are the ``assistant``
turns and the agent's text messages are the ``user`` turns; the agent's tool
calls and the tool results are not shown. It ends the conversation by writing
``###STOP###`` (goal reached), ``###TRANSFER###`` (handed to a human) or
``###OUT-OF-SCOPE###`` (the scenario does not say what to do).

The embedded 135M model does not follow a system prompt well enough to play a
customer or to write a stop token on its own; it does continue patterns from
earlier turns. So the simulator's history starts with a short example chat (the
``demo``, another customer, in the same flipped roles) that shows the three
moves a customer makes here: give the id when asked, say yes to a confirmation,
and end with ``###STOP###`` once the agent has answered or refused. The demo is
part of the prompt, not of the trajectory; it is recorded in
``info.user_info.demo`` of the results. Pass ``demo=()`` to drop it (e.g. for
strong API models).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
STOP_TOKENS = (STOP, TRANSFER, OUT_OF_SCOPE)

GLOBAL_USER_SIM_GUIDELINES = """You are a customer of an online bookshop, chatting with its support agent. You are the customer, not the agent.
Write only the customer's next message: one short sentence. Give information only when the agent asks for it.
When your goal is done, or the agent cannot help, end your message with ###STOP###. If you are transferred to a human agent, end with ###TRANSFER###. If your instructions do not say what to do, end with ###OUT-OF-SCOPE###.""".strip()

SYSTEM_PROMPT = """{global_user_sim_guidelines}

<scenario>
{instructions}
</scenario>""".strip()

# (role in the simulator's flipped history, text): "user" = what the agent said.
DEFAULT_DEMO: tuple[tuple[str, str], ...] = (
    ("user", "Hi! How can I help you today?"),
    ("assistant", "Hi, I want to return my order O2001."),
    ("user", "Sure. What is your customer id?"),
    ("assistant", "My customer id is C900."),
    ("user", "I'm sorry, but I cannot return that order."),
    ("assistant", "OK, thank you. Bye! ###STOP###"),
    ("user", "Hi! How can I help you today?"),
    ("assistant", "Hello, please cancel my order O2002. My customer id is C901."),
    ("user", "Shall I cancel order O2002? Please confirm."),
    ("assistant", "Yes, please."),
    ("user", "Order O2002 is cancelled."),
    ("assistant", "Thanks, bye! ###STOP###"),
)


def render_instructions(scenario: dict[str, Any] | str | None) -> str:
    """τ²'s ``user_scenario`` (persona + structured instructions) as scenario text."""
    if scenario is None:
        return ""
    if isinstance(scenario, str):
        return scenario
    lines = []
    if scenario.get("persona"):
        lines.append(f"Persona: {scenario['persona']}")
    ins = scenario.get("instructions")
    if isinstance(ins, str):
        lines.append(ins)
    elif isinstance(ins, dict):
        for key, label in (("known_info", None), ("reason_for_call", "Your goal:"),
                           ("unknown_info", "You do not know:"), ("task_instructions", None)):
            value = ins.get(key)
            if value:
                lines.append(f"{label} {value}" if label else str(value))
    return "\n".join(lines)


def is_stop(message: dict[str, Any]) -> bool:
    content = message.get("content")
    if message.get("tool_calls") or not content:
        return False
    return any(token in content for token in STOP_TOKENS)


@dataclass
class UserSimulator:
    llm: str
    scenario: dict[str, Any] | str | None
    guidelines: str = GLOBAL_USER_SIM_GUIDELINES
    demo: tuple[tuple[str, str], ...] = DEFAULT_DEMO
    max_tokens: int = 48
    temperature: float = 0.0
    top_logprobs: int = 5
    llm_args: dict[str, Any] = field(default_factory=dict)

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT.format(
            global_user_sim_guidelines=self.guidelines, instructions=render_instructions(self.scenario)
        )

    @staticmethod
    def flip_roles(trajectory: list[dict[str, Any]], to_user: set[int] | None = None) -> list[dict[str, Any]]:
        """The user's view: agent text → ``user``, own messages → ``assistant``; no tool traffic.

        ``to_user`` (indices of the agent messages that were sent to the user) lets the
        orchestrator exclude agent messages that went to the environment instead.
        """
        flipped = []
        for i, msg in enumerate(trajectory):
            role, content = msg["role"], msg.get("content")
            if role == "assistant":
                if msg.get("tool_calls") or (to_user is not None and i not in to_user):
                    continue
                flipped.append({"role": "user", "content": content or ""})
            elif role == "user" and not msg.get("tool_calls"):
                flipped.append({"role": "assistant", "content": content or ""})
        return flipped

    def build_messages(self, trajectory: list[dict[str, Any]], to_user: set[int] | None = None) -> list[dict[str, Any]]:
        demo = [{"role": r, "content": c} for r, c in self.demo]
        return [{"role": "system", "content": self.system_prompt}] + demo + self.flip_roles(trajectory, to_user)

    def generate(self, trajectory: list[dict[str, Any]], seed: int | None, to_user: set[int] | None = None,
                 retry: Any = None):
        from agentuq_nb import llm

        return llm.generate(
            self.build_messages(trajectory, to_user),
            model=self.llm,
            tools=None,
            top_logprobs=self.top_logprobs,
            temperature=self.temperature,
            seed=seed,
            max_tokens=self.max_tokens,
            retry=retry,
            **self.llm_args,
        )
