"""The paper's prompt template (GRAFT-SPEC §10).

One user message: the problem, then the instruction to reason step by step and put
the final answer in ``\\boxed{}``. Models with a chat template get it through their
tokenizer (so every policy wraps the same message in its own format); models
without one get the plain text.
"""

from __future__ import annotations

from typing import Any

INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def user_message(problem: str) -> str:
    """The user turn: the problem followed by the paper's instruction."""
    if not isinstance(problem, str) or not problem.strip():
        raise ValueError(f"problem must be a non-empty string, got {problem!r}")
    return f"{problem.strip()}\n\n{INSTRUCTION}"


def format_prompt(problem: str, tokenizer: Any | None = None) -> str:
    """The text a policy is conditioned on for `problem`.

    With a tokenizer that has a chat template, the message goes through
    ``apply_chat_template(..., add_generation_prompt=True)``; otherwise the plain
    user message followed by a newline is returned.
    """
    message = user_message(problem)
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True
        )
    return message + "\n"
