"""Counted input warnings as Python warnings: one ``InputDataWarning`` per kind, with its count and
the place of the first case ("3 sidecar rows have no role (first: FILE line 7)").

``InputWarnings`` (:mod:`agentuq_nb.io.errors`) collects the counts while a step runs (they also go
into the manifest); :func:`emit_input_warnings` says them once at the end, so a notebook sees them
like any warning and the command line prints each kind once.
"""
from __future__ import annotations

import warnings

from agentuq_nb.io.errors import InputWarnings
from agentuq_nb.records.reward_checks import TASK_MISMATCH

#: what a count of each kind means, said after the number
KIND_PHRASES = {
    "tools_inferred_from_calls": "results file(s) record no tool schemas: the agent's tools were inferred from its calls",
    "trajectories_without_decision_points": "trajectory(ies) have no agent decision point to sample",
    "sidecar_files_empty": "sidecar file(s) are empty (0 bytes): their messages have no token rows",
    "sidecar_blank_lines": "blank line(s) in sidecar files (skipped)",
    "sidecar_rows_without_role": "sidecar row(s) have no role (taken from the message they belong to)",
    "sidecar_rows_role_differs": "sidecar row(s) name another role than their message's (the message's is used)",
    "sidecar_rows_without_token": "sidecar row(s) have no token text (kept; the text is null)",
    "sidecar_row_count_differs": "message(s) whose sidecar rows differ in number from uq_logprobs.num_tokens",
    "sidecar_rows_joined_by_order": "sidecar row(s) matched no message timestamp and were joined by order",
    "sidecar_rows_unmatched_dropped": "sidecar row(s) matched no message and were dropped",
    "sidecar_rows_of_no_simulation": "sidecar row(s) carry the keys of no simulation in the results (dropped)",
    "assistant_messages_without_logprobs": "assistant message(s) carry no log-probs",
    "user_messages_without_logprobs": "user message(s) carry no log-probs",
    "simulations_without_reward": "simulation(s) have no reward",
    "tasks_not_the_simulated": "trajectories: " + TASK_MISMATCH,
    "tool_call_arguments_not_json": "tool call(s) whose arguments are not a JSON object (kept as written under "
                                    "arguments['__malformed_arguments__'])",
    "tau_bench_runs_raised": "τ-bench entries whose run raised an error (info.error: τ-bench wrote reward 0, "
                             "usually with an empty trajectory)",
    "tau_bench_system_prompt_differs": "τ-bench trajectory(ies) whose system prompt differs from the file's first "
                                       "(each keeps its own as system_prompt; scoring under the agent's prompt uses "
                                       "the first)",
    "tau_bench_reward_info_not_an_object": "τ-bench entries whose info.reward_info is not an object (their reward is "
                                           "the entry's; how the episode ended is unknown, not taken for max_steps)",
    "inspect_samples_missing": "Inspect sample(s) the log's header lists are not in the archive (a run that "
                               "stopped early, or a damaged log)",
    "simulations_reward_not_finite": "simulation(s) have a reward that is not a finite number (left out of "
                                     "failure prediction)",
    "tokens_without_chosen_logprob": "token(s) have no chosen log-prob (null)",
    "chosen_logprob_infinite_set_null": "token(s) with an infinite chosen log-prob (set to null)",
    "chosen_logprob_positive_set_null": "token(s) with a positive chosen log-prob (set to null)",
    "topk_logprob_nonfinite_dropped": "token(s) with non-finite top-k log-probs (those entries dropped)",
    "topk_lengths_differ": "token(s) whose topk_tokens and topk_logprobs differ in length (statistics use the "
                           "log-probs)",
    "uq_summary_without_assistant": "simulation(s) whose uq_summary has no 'assistant' role",
    "uq_summary_unknown_role": "uq_summary role(s) agentuq does not write (kept under their own name)",
    "uq_summary_role_not_a_mapping": "uq_summary role entries that are not mappings (dropped)",
    "uq_summary_value_not_a_number": "uq_summary value(s) that are not numbers (set to null)",
    "uq_summary_value_missing": "uq_summary value(s) missing, null or not finite (null)",
}


class InputDataWarning(UserWarning):
    """Input that was used but is not as it should be: ``kind``, ``count`` (of ``of``, where the kind is counted
    among a total) and the first ``example``."""

    def __init__(self, kind: str, count: int, example: str, of: int | None = None):
        self.kind, self.count, self.example, self.of = kind, int(count), example, of
        phrase = KIND_PHRASES.get(kind, kind.replace("_", " "))
        number = f"{self.count} of {int(of)}" if of is not None else f"{self.count}"
        super().__init__(f"{number} {phrase} (first: {example})" if example else f"{number} {phrase}")


def emit_input_warnings(counted: InputWarnings, stacklevel: int = 2) -> None:
    """One :class:`InputDataWarning` per kind counted in ``counted``."""
    for kind, info in counted.as_dict().items():
        warnings.warn(InputDataWarning(kind, info["count"], info["example"], info.get("of")),
                      stacklevel=stacklevel + 1)
