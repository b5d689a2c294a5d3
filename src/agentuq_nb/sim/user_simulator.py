"""The LLM user simulator: a scenario, a role-flipped history, and stop tokens.

As in τ²-bench, the simulator is an LLM whose *own* messages are the ``assistant``
turns and the agent's text messages are the ``user`` turns; the agent's tool calls
and the tool results are not shown. It ends the conversation by writing
``###STOP###`` (goal reached), ``###TRANSFER###`` (handed to a human) or
``###OUT-OF-SCOPE###`` (the scenario does not say what to do).

Two prompt styles:

* ``"tau2"`` — τ²-bench's: system prompt = guidelines + ``<scenario>``, then the
  flipped history verbatim. For capable models.
* ``"tiny"`` — for the embedded 135M model, which ignores a system prompt once a
  conversation is under way and mostly echoes the last turn (measured: greedy and
  sampled, it never wrote a stop token in τ²'s format). Each agent message it sees is
  wrapped in a one-line reminder (``TURN_TEMPLATE``; the first one restates the goal,
  ``FIRST_TURN_TEMPLATE``), and the flipped history starts with a short example chat
  (``DEMO``: another customer, same wrapping) showing the three moves of a customer
  here — give the id when asked, say yes to a confirmation, end with
  ``###STOP### Thanks, bye!`` once the agent has answered or refused. The model does
  continue such patterns: it then stops after refusals and answers and keeps going
  after questions.

The messages the simulator generates are the trajectory's user messages, unchanged;
the wrapping and the demo are prompt only and are recorded in ``info.user_info`` of
the results, so the simulator's context can be rebuilt (:meth:`UserSimulator.build_messages`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

STOP = "###STOP###"
TRANSFER = "###TRANSFER###"
OUT_OF_SCOPE = "###OUT-OF-SCOPE###"
STOP_TOKENS = (STOP, TRANSFER, OUT_OF_SCOPE)
STYLES = ("tiny", "tau2")

GLOBAL_USER_SIM_GUIDELINES = """You are a customer of an online bookshop, chatting with its support agent. You are the customer, not the agent.
Write only the customer's next message, in one short sentence. Give information only when the agent asks for it.
When your goal is done, or the agent cannot help, end your message with ###STOP###. If you are transferred to a human agent, end with ###TRANSFER###. If your instructions do not say what to do, end with ###OUT-OF-SCOPE###.""".strip()

SYSTEM_PROMPT = """{global_user_sim_guidelines}

<scenario>
{instructions}
</scenario>""".strip()

CLOSING = "###STOP### Thanks, bye!"
TURN_TEMPLATE = 'Agent: "{content}"\nReply as the customer in one short sentence. When you are done, end with ###STOP###.'
FIRST_TURN_TEMPLATE = 'Agent: "{content}"\nStart the chat. Your goal: {goal}\nSay it in one short sentence.'

# The example chat of the "tiny" style: (speaker, text); a chat starts at each "goal".
DEMO: tuple[dict[str, str], ...] = (
    {"goal": "You want to return your order O2001."},
    {"agent": "Hi! How can I help you today?"},
    {"customer": "Hi, I want to return my order O2001."},
    {"agent": "What is your customer id?"},
    {"customer": "My customer id is C900."},
    {"agent": "I'm sorry, but I cannot return that order."},
    {"customer": CLOSING},
    {"goal": "You want to cancel your order O2002."},
    {"agent": "Hi! How can I help you today?"},
    {"customer": "Hello, please cancel my order O2002."},
    {"agent": "Shall I cancel order O2002? Please confirm."},
    {"customer": "Yes, please."},
    {"agent": "Order O2002 is cancelled."},
    {"customer": CLOSING},
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


def scenario_goal(scenario: dict[str, Any] | str | None) -> str:
    if isinstance(scenario, dict) and isinstance(scenario.get("instructions"), dict):
        return str(scenario["instructions"].get("reason_for_call") or "")
    return render_instructions(scenario)


def is_stop(message: dict[str, Any]) -> bool:
    content = message.get("content")
    if message.get("tool_calls") or not content:
        return False
    return any(token in content for token in STOP_TOKENS)


@dataclass
class UserSimulator:
    llm: str
    scenario: dict[str, Any] | str | None
    style: str = "tiny"
    guidelines: str = GLOBAL_USER_SIM_GUIDELINES
    demo: tuple[dict[str, str], ...] = DEMO
    max_tokens: int = 40
    temperature: float = 0.0
    top_logprobs: int = 5
    llm_args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"user simulator style must be one of {STYLES}, got {self.style!r}")

    @property
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT.format(
            global_user_sim_guidelines=self.guidelines, instructions=render_instructions(self.scenario)
        )

    def describe(self) -> dict[str, Any]:
        """What ``info.user_info`` records about the prompt (enough to rebuild it)."""
        out: dict[str, Any] = {"style": self.style, "system_prompt_template": SYSTEM_PROMPT}
        if self.style == "tiny":
            out.update(turn_template=TURN_TEMPLATE, first_turn_template=FIRST_TURN_TEMPLATE, demo=list(self.demo))
        return out

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

    def _wrap(self, flipped: list[dict[str, Any]], goal: str) -> list[dict[str, Any]]:
        out, first = [], True
        for msg in flipped:
            if msg["role"] == "user":
                template = FIRST_TURN_TEMPLATE if first else TURN_TEMPLATE
                msg = {"role": "user", "content": template.format(content=msg["content"], goal=goal)}
                first = False
            out.append(msg)
        return out

    def demo_messages(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        goal, first = "", True
        for item in self.demo:
            if "goal" in item:
                goal, first = item["goal"], True
            elif "agent" in item:
                template = FIRST_TURN_TEMPLATE if first else TURN_TEMPLATE
                out.append({"role": "user", "content": template.format(content=item["agent"], goal=goal)})
                first = False
            elif "customer" in item:
                out.append({"role": "assistant", "content": item["customer"]})
        return out

    def build_messages(self, trajectory: list[dict[str, Any]], to_user: set[int] | None = None) -> list[dict[str, Any]]:
        """The simulator's prompt: system, (demo), flipped (and, in ``tiny`` style, wrapped) history."""
        system = [{"role": "system", "content": self.system_prompt}]
        flipped = self.flip_roles(trajectory, to_user)
        if self.style == "tau2":
            return system + flipped
        return system + self.demo_messages() + self._wrap(flipped, scenario_goal(self.scenario))

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
