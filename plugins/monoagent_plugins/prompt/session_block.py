"""Section 3, the Session block: how this turn is delivered and which surface it is on.

The block classifies the turn by ``request.delivery``:

* ``console``: an interactive console (terminal or web); the person reads the reply in this
  thread. The conversation id is stated verbatim, because host-side tools that bind work to the
  thread need it quoted exactly; an id the sanitiser would alter is omitted rather than shown
  inexactly.
* ``push``: a chat channel the host delivers the reply into. The route (thread id, callback URL,
  delivery token) stays host-side, and the block forbids copying, requesting, inferring or
  passing one, or redirecting the reply through a surface id.
* ``request`` (and anything unknown): cron, webhook or API; the reply is returned to the caller
  and the conversation cannot receive a proactive follow-up. A turn with ``request.notify`` (a
  cron job or webhook hook that notifies) adds that the successful final reply is delivered
  verbatim to the configured destinations, and how to stay silent: reply exactly
  :data:`~monoagent._kernel.model.SILENT_RESULT`.

Chat turns add a ``Surface:`` line (kind, sanitised name, channel id) and the transport's
message budget. The name is user-controlled (a channel name, a chat title, a DM counterpart's
handle), so it is sanitised exactly like a speaker's display name: one line, no control,
zero-width or bidi characters, fence tokens neutralised, capped at 80 characters; an id the
sanitiser would alter is left out rather than shown inexactly. A surface the block cannot state
truthfully (a kind other than ``dm``, ``channel`` or ``group``, an id that is not a string, a
budget that is not a positive integer) fails the turn with an error naming the field. Without
a surface the block is byte-identical to one built before surfaces existed. Human identity and
routes never appear here: no sender, user id, thread id, callback URL, delivery token or request
metadata is rendered.
"""

from __future__ import annotations

from monoagent import SILENT_RESULT, Section, Surface, Turn, TurnFailed, hookimpl, neutralise_untrusted, one_line

HEADING = "# Session"
SURFACE_KINDS = ("dm", "channel", "group")
NAME_MAX_CHARS = 80
ID_MAX_CHARS = 256

ROUTE_RULE = (
    "Never copy, request, infer or pass a thread identifier, callback URL or delivery token, and never use "
    "a surface identifier (a channel or chat id) to send or redirect your reply."
)
MEMORY_SENTENCE = (
    "Persistence is host-owned: when someone asks you to remember something, acknowledge it and let "
    "post-turn capture write it. Do not edit memory files, databases, manifests or indexes through tools."
)
BUDGET_SENTENCE = (
    "Messages here are delivered in parts of at most {budget} characters; anything longer is continued in "
    "the thread under your first message, so write to that budget rather than guessing one."
)
#: Names are cut to this many characters before neutralising, so a huge name costs nothing.
_RAW_NAME_CHARS = 4096


def sanitise_name(text: str, limit: int = NAME_MAX_CHARS) -> str:
    """A user-controlled name made safe to quote in the prompt, like a speaker's display name.

    :func:`monoagent._boundary.fences.one_line` (every line break and whitespace run becomes one
    space; control, format (zero-width, bidi override) and surrogate characters are dropped)
    with fence tokens neutralised; double quotes become single quotes; the result is capped at
    ``limit`` characters, ending in an ellipsis when cut.
    """
    cleaned = one_line(neutralise_untrusted(one_line(text, _RAW_NAME_CHARS)), _RAW_NAME_CHARS)
    return one_line(cleaned.replace('"', "'"), limit)


def _exact(value: str | None) -> str | None:
    """``value`` when it can be shown verbatim (the sanitiser leaves it unchanged), else None."""
    if not value or "`" in value or sanitise_name(value, ID_MAX_CHARS) != value:
        return None
    return value


def _console(turn: Turn) -> list[str]:
    console = sanitise_name(turn.request.console or "") or "terminal"
    lines = [
        f"This is an interactive console conversation on the {console} console. "
        "The person reads your reply in this thread."
    ]
    conversation_id = _exact(turn.session.logical_conversation_id)
    if conversation_id is not None:
        lines.append(f"Conversation id: `{conversation_id}`")
    lines.append(
        "Never use the conversation id, a callback URL or a delivery token to send or redirect your reply; "
        "the host delivers it to this thread."
    )
    return lines


def _push() -> list[str]:
    return [
        "This is an interactive push conversation: the host delivers your final reply to this conversation.",
        ROUTE_RULE,
    ]


NOTIFY_SENTENCE = (
    "Your successful final reply is delivered verbatim to this job's notify destinations. When there is "
    f"nothing worth delivering, reply with exactly {SILENT_RESULT} and nothing else: then nothing is delivered."
)


def _request(notify: bool) -> list[str]:
    lines = [
        "This is a request-driven turn (a scheduled job, webhook or API call): your final reply is returned "
        "to the caller. This conversation cannot itself receive a proactive follow-up, so put everything "
        "the caller needs in this reply.",
        ROUTE_RULE,
    ]
    if notify:
        lines.append(NOTIFY_SENTENCE)
    return lines


def checked_surface(surface: object) -> Surface:
    """``surface`` when the block can state it truthfully; else an error naming the field and what is allowed."""
    if not isinstance(surface, Surface):
        raise TurnFailed(f"TurnRequest.surface is a {type(surface).__name__}; allowed: a Surface(kind, id, name, message_budget) or None")
    if surface.kind not in SURFACE_KINDS:
        raise TurnFailed(f"TurnRequest.surface.kind is {surface.kind!r}; allowed: 'dm', 'channel' or 'group'")
    if not isinstance(surface.id, str):
        raise TurnFailed(f"TurnRequest.surface.id is a {type(surface.id).__name__}; allowed: the channel or chat id as a string")
    if surface.name is not None and not isinstance(surface.name, str):
        raise TurnFailed(f"TurnRequest.surface.name is a {type(surface.name).__name__}; allowed: a string or None")
    budget = surface.message_budget
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise TurnFailed(
            f"TurnRequest.surface.message_budget is {budget!r}; allowed: a positive integer (characters per message) or None"
        )
    return surface


def _surface(surface: Surface) -> list[str]:
    """The ``Surface:`` line and, when the transport has one, the message budget line."""
    surface = checked_surface(surface)
    name = sanitise_name(surface.name or "")
    surface_id = _exact(surface.id)
    where = f" ({surface_id})" if surface_id else ""
    if surface.kind == "dm":
        place = f'a direct message with "{name}"' if name else "a direct message"
        audience = "It is one-to-one: only the person you are talking with can read what you write here."
    elif surface.kind == "group":
        place = f'the group "{name}"' if name else "a group"
        audience = "It is shared: several people can read what you write here."
    else:
        place = f'the channel "{name}"' if name else "a channel"
        audience = "It is shared: several people can read what you write here."
    lines = [f"Surface: you are talking in {place}{where}. {audience}"]
    budget = surface.message_budget
    if budget is not None:
        lines.append(BUDGET_SENTENCE.format(budget=budget))
    return lines


@hookimpl(trylast=True)
def section_session(turn: Turn) -> Section:
    """The documented Session block for this turn's delivery, surface and memory setting."""
    delivery = turn.request.delivery
    if delivery == "console":
        paragraphs = [_console(turn)]
    elif delivery == "push":
        paragraphs = [_push()]
    else:
        paragraphs = [_request(turn.request.notify is True)]
    surface = turn.request.surface
    if surface is not None and delivery != "console":
        paragraphs.append(_surface(surface))
    if turn.session.memory_configured:
        paragraphs.append([MEMORY_SENTENCE])
    body = "\n\n".join("\n".join(lines) for lines in paragraphs)
    return Section(id="session", text=f"{HEADING}\n\n{body}", order=300, stability="stable", source="session")
