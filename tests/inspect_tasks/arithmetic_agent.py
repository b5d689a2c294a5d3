"""A small Inspect AI agent task for the Inspect client test (``tests/test_inspect_logs.py``).

Two samples, two tools (``add``, ``multiply``), Inspect's own agent loop (``react``, which ends when the model
calls ``submit``), and three scorers: ``includes`` (C/I) and ``tools_used``, a number (the share of the two tools
the agent called), both depending on what the model wrote - which differs between llama.cpp builds (AVX2 and
AVX-512 kernels round differently) - and ``is_add_sample`` (1 for the ``add`` sample, 0 for the other), which does
not: a reward with both outcomes on every machine. Run with ``inspect eval tests/inspect_tasks/arithmetic_agent.py --model ...``; it needs the
``[inspect]`` extra and is not imported by the test suite itself.
"""
from inspect_ai import Task, task
from inspect_ai.agent import react
from inspect_ai.dataset import Sample
from inspect_ai.model import ChatMessageAssistant
from inspect_ai.scorer import Score, Target, includes, mean, scorer
from inspect_ai.solver import TaskState
from inspect_ai.tool import tool

TOOLS = ("add", "multiply")


@tool
def add():
    async def execute(x: int, y: int) -> int:
        """Add two integers.

        Args:
            x: The first integer.
            y: The second integer.
        """
        return x + y

    return execute


@tool
def multiply():
    async def execute(x: int, y: int) -> int:
        """Multiply two integers.

        Args:
            x: The first integer.
            y: The second integer.
        """
        return x * y

    return execute


@scorer(metrics=[mean()])
def tools_used():
    """The share of the task's tools the agent called at least once (0, 0.5 or 1)."""

    async def score(state: TaskState, target: Target) -> Score:
        called = {call.function for m in state.messages if isinstance(m, ChatMessageAssistant)
                  for call in (m.tool_calls or [])}
        return Score(value=len(called & set(TOOLS)) / len(TOOLS), explanation=", ".join(sorted(called)))

    return score


@scorer(metrics=[mean()])
def is_add_sample():
    """1 for the ``add`` sample, 0 for ``multiply``: a label the model's output cannot change."""

    async def score(state: TaskState, target: Target) -> Score:
        return Score(value=1.0 if state.sample_id == "add" else 0.0)

    return score


@task
def arithmetic_agent(message_limit: int = 8):
    return Task(
        dataset=[
            Sample(id="add", input="What is 2 plus 3? Use the add tool, then submit the number.", target="5"),
            Sample(id="multiply", input="What is 6 times 7? Use the multiply tool, then submit the number.",
                   target="42"),
        ],
        solver=react(tools=[add(), multiply()]),
        scorer=[includes(), tools_used(), is_add_sample()],
        message_limit=message_limit,
    )
