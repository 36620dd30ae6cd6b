"""The ``dynamic_context`` section (dynamic, order 680): context the caller passes for this turn only.

The text is :attr:`TurnRequest.context <monoagent._kernel.model.TurnRequest.context>` (``monoagent
run --context``/``--context-file``, ``agent.respond(TurnRequest(..., context=...))``), cut to
:data:`~monoagent._kernel.model.REQUEST_CONTEXT_MAX_CHARS` characters with a
``dynamic_context_truncated`` diagnostic, its fence tokens and cache boundary markers quoted. The
section is dynamic and the text is never written to history: the next turn has it only if its
caller passes it again. A project contributes its own per-turn context by implementing
``section_dynamic_context`` (its answer replaces this one).
"""

from __future__ import annotations

from monoagent import REQUEST_CONTEXT_MAX_CHARS, Section, Turn, hookimpl
from monoagent_plugins.prompt.section_text import cut, quoted_text

HEADING = "# Context for this turn\n\nThe caller of this turn supplied the following context. It applies to this turn only."


@hookimpl(trylast=True)
def section_dynamic_context(turn: Turn) -> Section | None:
    context = turn.request.context
    if not context or not context.strip():
        return None
    text, truncated = cut(context, REQUEST_CONTEXT_MAX_CHARS)
    body = quoted_text(text.strip())
    if truncated:
        turn.diagnose(
            "dynamic_context_truncated",
            f"the request's context was cut from {len(context)} to {REQUEST_CONTEXT_MAX_CHARS} characters",
            "dynamic_context",
        )
        body += f"\n\n[context truncated: kept {REQUEST_CONTEXT_MAX_CHARS} of {len(context)} characters]"
    return Section("dynamic_context", f"{HEADING}\n\n{body}", order=680, stability="dynamic", source="request")
