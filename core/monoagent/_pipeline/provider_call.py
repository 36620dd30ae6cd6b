"""The reliability of the provider call: retries, the fallback chain, streaming accounting, cancellation.

A turn's provider work is a sequence of *attempts*. An attempt runs one model's tool loop (provider
steps, tool calls, tool results) until the model answers without tool calls. Attempts are tried in
this order:

* the primary model (the turn's ``model``) first, then each model of ``runtime.fallbacks`` in order;
* a retryable :class:`~monoagent._kernel.errors.ProviderError` (429, 5xx, overloaded, a dropped connection,
  a read timeout) retries the same model up to ``providers.client.maxRetries`` times, waiting
  :func:`backoff_delay_ms` between tries, then moves to the next model of the chain;
* a :class:`~monoagent._kernel.errors.ContextLimitError` on the primary's first attempt first gets
  the run's one reactive compaction (the harness's ``compact`` step): when it returns a smaller
  request, the same step is sent again with it (this attempt's tool-loop messages kept);
  otherwise, and on any later attempt, a ContextLimitError moves to the next model at once
  (retrying the same window would not help);
* any other error, and a ContextLimitError or exhausted retries with no model left, fails the turn
  with that error.

Only the primary's first attempt sends the prompt as assembled; every retry and every backup runs
**stateless**, carrying a bounded snapshot of what the run did before (:mod:`monoagent._pipeline.stateless`).

Signed reasoning blocks (:class:`~monoagent._kernel.model.ReasoningBlock`) stay on the step's
assistant message inside the attempt's tool loop, so the next step sends them back; a stateless
retry or fallback starts without them (its snapshot is text only).

``runtime.maxTurns`` counts the provider steps that returned, over all attempts, so retries never
widen the cap. The turn's usage sums every step that returned, in every attempt; its tool activity
lists every tool call that ran, in every attempt (their side effects happened). The final text is
only the answering attempt's.

**The final round.** When the run reaches its last allowed step after tool rounds (step =
maxTurns, and maxTurns > 1), that round is sent without tools and with the final-answer
instruction (the ``retry_instruction`` section), so the run ends with an answer made of what it
has; a model that calls tools all the same fails the run as before (those calls never run).

**Rounds.** Before every provider round after a run's first, :meth:`ProviderCall._next_round`
sets :attr:`Turn.provider_round <monoagent._kernel.turn.Turn.provider_round>` (the step, the
recoverable tool failures of the round before, whether this is the final round, whether it
continues a cut-off reply) and re-renders the dynamic sections for it
(:func:`~monoagent._pipeline.assembly.refresh_dynamic_sections`); the stable part stays
byte-identical. A run that answers in one step never does this work.

**Continuation.** A step that stops at the output-token limit (stop reason :data:`MAX_TOKENS`)
without tool calls is continued: its text goes back as an assistant message and the next round
carries the ``recovery_continuation`` hint, up to ``runtime.maxContinuations`` times per attempt
and within ``runtime.maxTurns``; the answer is the cut-off replies and the final one joined. A
tool round in between ends the continuation (the answer is what follows it).

Every step is read by :func:`monoagent._pipeline.stream.read_step`, within the stream limits of
``providers.client``; every tool call it requests is run by the run's
:class:`~monoagent._pipeline.tool_loop.ToolLoop`, and its result goes back to the model in the next step.

The whole loop is bounded as well: ``runtime.runTimeoutMs`` is the deadline of the run (steps,
retries, backoff, fallbacks and tool calls), ending it with
:class:`~monoagent._kernel.errors.RunDeadlineExceeded` (settlement ``run_deadline``); and the same tool
called with the same arguments more than ``runtime.maxRepeatedToolCalls`` times in a row (over
the whole run, retries included), or in a repeating cycle of up to
:data:`~monoagent._pipeline.tool_loop.MAX_REPEATED_CYCLE` calls (A, B, A, B, ...), ends it before that
call runs, with :class:`~monoagent._kernel.errors.RepeatedToolCall` (settlement ``repeated_tool_call``;
the tool loop keeps that count).

Events (``data`` fields): ``provider_request`` (``attempt``, ``stateless``,
``diagnostics.transport_requested``), ``text_delta`` (``attempt``), ``provider_retry``
(``attempt``: the next one, ``model``, ``delay_ms``, ``code``, ``status``, ``retryable``, ``error``),
``provider_response`` (``reasoning_blocks`` and ``reasoning_bytes`` when the step streamed signed
reasoning: sizes only, never its text), ``provider_fallback`` (``from``, ``to``, ``reason``:
``retries_exhausted`` or ``context_limit``, ``attempt``), ``provider_attempt_discarded`` (``attempt``, ``model``, ``text_chars``, ``text_bytes``,
``tool_calls``: streamed text a caller should drop), ``prompt_cache_diagnostics`` (with
``providers.client.promptCacheDiagnostics``, see :func:`cache_fingerprint`), ``prompt_refreshed``
(``step``, ``changed``: section ids, ``stable_sha256``, ``dynamic_sha256``: when a round's dynamic
sections differ from the round before), ``provider_continuation`` (``step``: the cut-off one,
``continuation``, ``max_continuations``, ``text_bytes``).

Delays go through the module-level :data:`sleep` and jitter through :data:`jitter`, which tests
replace so they never wait for real time.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import random
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import attrs

from monoagent._boundary.text import utf8_len
from monoagent._kernel import hookspecs
from monoagent._kernel.errors import ContextLimitError, PluginError, ProviderError, RunDeadlineExceeded, TurnFailed
from monoagent._kernel.model import (
    AssembledPrompt,
    Message,
    ProviderRequest,
    ReasoningBlock,
    ToolActivity,
    ToolCall,
    Usage,
)
from monoagent._kernel.tool_names import tool_name_problem
from monoagent._kernel.turn import RECOVERABLE_TOOL_STATUSES, FailedToolCall, ProviderRound, StepOutcome
from monoagent._pipeline.assembly import changed_sections, refresh_dynamic_sections
from monoagent._pipeline.stateless import snapshot_block, snapshot_entry_text, snapshot_entry_tool, stateless_prompt
from monoagent._pipeline.stream import StreamLimits, read_step
from monoagent._pipeline.tool_loop import ToolLoop, tool_message

if TYPE_CHECKING:
    from monoagent._pipeline.turn_run import TurnRun

BASE_DELAY_MS = 1_000
"""Backoff before retry n (1-based) is drawn uniformly from [0, min(cap, BASE_DELAY_MS * 2**(n-1))]."""

ERROR_DETAIL_CHARS = 500

MAX_TOKENS = "max_tokens"
"""The stop reason of a step cut off at the output-token limit, as every bundled provider reports it
(Anthropic's own ``max_tokens``; the OpenAI formats' ``length`` is mapped to it)."""

Compact = Callable[[AssembledPrompt], Awaitable["AssembledPrompt | None"]]
"""The reactive compaction step: given the refused request, a smaller one, or None to let the error stand."""

sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
"""How the backoff waits (seconds); tests replace it."""

jitter: Callable[[], float] = random.random
"""A number in [0, 1) scaling the exponential backoff (full jitter); tests replace it."""


# --------------------------------------------------------------------------- policy


def backoff_delay_ms(retry: int, *, cap_ms: int, retry_after: float | None = None, rand: float | None = None) -> int:
    """Milliseconds to wait before retry number ``retry`` (1-based) of the same model.

    A server's ``Retry-After`` (``retry_after`` seconds) is honoured as given, without jitter;
    otherwise exponential backoff with full jitter. Either way the delay never exceeds ``cap_ms``
    (``providers.client.maxRetryDelayMs``).
    """
    if retry_after is not None and retry_after >= 0:  # NaN fails this test; +inf is capped
        return round(min(retry_after * 1000, cap_ms))
    ceiling = min(cap_ms, BASE_DELAY_MS * 2 ** max(retry - 1, 0))
    return int(ceiling * (jitter() if rand is None else rand))


def error_code(exc: ProviderError) -> str:
    """A short machine-readable name for a provider failure, for events."""
    if isinstance(exc, ContextLimitError):
        return "context_limit"
    if exc.code:
        return exc.code
    if exc.status is not None:
        return f"http_{exc.status}"
    return "provider_unavailable" if exc.retryable else "provider_error"


# --------------------------------------------------------------------------- what a run leaves behind


@attrs.define
class PartialAttempt:
    """What the unfinished attempt of a cancelled or failed run had produced.

    Kept as :attr:`Turn.partial <monoagent._kernel.turn.Turn.partial>` when a run is cancelled or fails, for the continuity account:
    ``text`` is the assistant text the interrupted attempt streamed (every step of it, as streamed),
    ``tool_activity`` every tool call and result that completed in the run (all attempts), ``model``
    and ``attempt`` the interrupted attempt, ``step`` its provider step.
    """

    model: str
    attempt: int
    step: int
    text: str = ""
    tool_activity: tuple[ToolActivity, ...] = ()

    @property
    def text_bytes(self) -> int:
        return utf8_len(self.text)

    def event_data(self) -> dict[str, int]:
        """Sizes only, never the text: for ``run_cancelled`` and ``run_failed``."""
        return {"partial_text_bytes": self.text_bytes, "partial_tool_calls": len(self.tool_activity)}


def partial_event_data(turn: TurnRun) -> dict[str, int]:
    """The size fields of the run's :class:`PartialAttempt`, or nothing when there is none."""
    return turn.partial.event_data() if turn.partial is not None else {}


@attrs.frozen
class Answer:
    """The attempt that answered, with what the whole run accumulated.

    ``tool_loop`` holds the answering attempt's own tool-loop messages (each assistant step that
    called tools, then its tool results), in order: what a warm session's transcript keeps.
    """

    outcome: StepOutcome
    model: str
    attempt: int
    steps: int
    usage: Usage
    tool_activity: tuple[ToolActivity, ...]
    primary_model: str
    transport: str
    tool_loop: tuple[Message, ...] = ()
    pending: tuple[ToolCall, ...] = ()
    """The client-side calls the answering step made (the caller runs them): the run ended after that step."""

    @property
    def fallback(self) -> bool:
        return self.model != self.primary_model

    def event_data(self) -> dict[str, Any]:
        """The ``run_completed`` fields this module owns."""
        return {
            "attempt": self.attempt,
            "fallback": self.fallback,
            "primary_model": self.primary_model,
            "diagnostics": {"transport_requested": self.transport},
        }


# --------------------------------------------------------------------------- prompt-cache diagnostics


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cache_fingerprint(request: ProviderRequest) -> dict[str, Any]:
    """Metadata of one provider request for prompt-cache analysis: hashes and sizes only.

    Never the prompt text, tool arguments, cache keys, endpoints or credentials: SHA-256 and UTF-8
    byte sizes of the stable system text, the dynamic system text and the tool definitions (their
    canonical JSON), and the count and total bytes of the messages.
    """
    prompt = request.prompt
    stable = prompt.stable_text.encode("utf-8", "replace")
    dynamic = prompt.dynamic_text.encode("utf-8", "replace")
    definitions = [attrs.asdict(t, filter=lambda field, _: field.init) for t in request.tools]  # not ValidText's record
    tools = json.dumps(definitions, sort_keys=True, separators=(",", ":"), default=str).encode()
    return {
        "stable_sha256": _sha(stable),
        "stable_bytes": len(stable),
        "dynamic_sha256": _sha(dynamic),
        "dynamic_bytes": len(dynamic),
        "tools_sha256": _sha(tools),
        "tools_bytes": len(tools),
        "tool_count": len(request.tools),
        "message_count": len(request.messages),
        "message_bytes": sum(utf8_len(m.content) for m in request.messages),
    }


# --------------------------------------------------------------------------- the call


def _checked_tool_names(request: ProviderRequest) -> ProviderRequest:
    """``request`` as a ``prepare_provider_request`` implementation answered it, when every tool it
    offers has a name the providers accept; a :class:`~monoagent._kernel.errors.PluginError`
    otherwise (registered and provided tools were checked already: only that hook can add a name)."""
    for spec in request.tools:
        problem = tool_name_problem(spec.name)
        if problem:
            raise PluginError(f"a prepare_provider_request implementation offered the provider a tool whose {problem}")
    return request


class _AttemptFailed(Exception):
    def __init__(self, error: ProviderError, attempt: _Attempt) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempt = attempt


@attrs.define
class _Attempt:
    """One attempt's text: each finished step's in ``texts``, the streaming step's in ``live``.

    A buffer rather than a list of deltas, so a flood of tiny deltas costs its bytes, not an
    object per delta.
    """

    number: int
    model: str
    texts: list[str] = attrs.Factory(list)
    live: io.StringIO | None = None
    tool_calls: int = 0
    failed_step_text: str = ""
    tool_loop: list[Message] = attrs.Factory(list)
    pending: tuple[ToolCall, ...] = ()

    @property
    def step_text(self) -> str:
        return self.live.getvalue() if self.live is not None else ""

    @property
    def text(self) -> str:
        return "".join(self.texts) + self.step_text


class ProviderCall:
    """Runs the provider side of one turn: attempts, retries, fallbacks, the tool loop.

    Built by the harness per turn with the run's :class:`~monoagent._pipeline.tool_loop.ToolLoop`;
    :meth:`run` returns the :class:`Answer` or raises the error that ended the turn (after storing
    a :class:`PartialAttempt` on the turn).
    """

    def __init__(
        self, turn: TurnRun, prompt: AssembledPrompt, tools: ToolLoop, *, compact: Compact | None = None,
        resumed: tuple[Message, ...] = (),
    ) -> None:
        self.turn = turn
        self.resumed = resumed
        """The open turn's steps and the caller's results a continuation starts from (after the user message)."""
        self.prompt = prompt
        self.tools = tools
        self.compact = compact
        config = turn.config
        self.max_turns = config.runtime.max_turns
        self.max_continuations = config.runtime.max_continuations
        self.run_timeout_ms = config.runtime.run_timeout_ms
        client = config.providers.client
        self.limits = StreamLimits.from_config(client)
        self.max_retries = client.max_retries
        self.cap_ms = client.max_retry_delay_ms
        self.transport = client.transport
        self.cache_diagnostics = client.prompt_cache_diagnostics
        self.chain = [turn.model, *[m for m in config.runtime.fallbacks if m != turn.model]]
        self.steps = 0
        self.usage = Usage()
        self.activity: list[ToolActivity] = []
        self.transcript: list[str] = []
        self.current: _Attempt | None = None
        self.reason = "provider_error"
        self.deadline: asyncio.Timeout | None = None
        self.call_ids: set[str] = set()
        self.id_suffixes: dict[str, int] = {}

    async def run(self) -> Answer:
        try:
            return await self._bounded_run()
        except BaseException:
            current = self.current
            if current is not None:
                self.turn.partial = PartialAttempt(
                    current.model, current.number, self.steps + 1, current.text, tuple(self.activity)
                )
            raise

    async def _bounded_run(self) -> Answer:
        deadline = self.deadline = asyncio.timeout(self.run_timeout_ms / 1000)
        try:
            async with deadline:
                return await self._run()
        except TimeoutError:
            if not deadline.expired():
                raise
        raise RunDeadlineExceeded(
            f"the run passed its deadline, runtime.runTimeoutMs = {self.run_timeout_ms} ms (provider steps, retries "
            f"and tool calls together), after {self.steps} provider steps; nothing was committed (raise runtime.runTimeoutMs)"
        )

    def _next_move(self, error: ProviderError, retry: int, last_model: bool) -> str:
        """``retry`` the same model, ``fallback`` to the next one, or ``fail`` the turn."""
        if isinstance(error, ContextLimitError):
            return "fail" if last_model else "fallback"
        if not error.retryable:
            return "fail"
        if retry < self.max_retries:
            return "retry"
        return "fail" if last_model else "fallback"

    async def _run(self) -> Answer:
        number = 0
        for index, model in enumerate(self.chain):
            runtime = self.turn.agent.provider(model)
            retry = 0
            while True:
                number += 1
                prompt = self.prompt
                if number > 1:
                    prompt = stateless_prompt(self.prompt, snapshot_block(self.transcript, self.reason))
                attempt = _Attempt(number, model)
                try:
                    outcome = await self._attempt(attempt, runtime, prompt, number > 1)
                except _AttemptFailed as failed:
                    error = failed.error
                    self._record_failure(failed.attempt, error)
                    move = self._next_move(error, retry, index == len(self.chain) - 1)
                    if move == "fail":
                        raise error from None
                    self._discard(failed.attempt, error)
                    if move == "fallback":
                        reason = "context_limit" if isinstance(error, ContextLimitError) else "retries_exhausted"
                        self.turn.emit(
                            "provider_fallback", **{"from": model, "to": self.chain[index + 1]}, reason=reason, attempt=number + 1
                        )
                        break
                    retry += 1
                    delay = backoff_delay_ms(retry, cap_ms=self.cap_ms, retry_after=error.retry_after)
                    self.turn.emit(
                        "provider_retry",
                        attempt=number + 1,
                        model=model,
                        retry=retry,
                        delay_ms=delay,
                        code=error_code(error),
                        status=error.status,
                        retryable=True,
                        error=self._detail(error),
                    )
                    await sleep(delay / 1000)
                    continue
                self.current = None
                return Answer(
                    outcome, model, number, self.steps, self.usage, tuple(self.activity), self.turn.model, self.transport,
                    tuple(attempt.tool_loop), attempt.pending,
                )
        raise TurnFailed("no provider model to try (runtime.model and runtime.fallbacks are empty)")

    def _record_failure(self, attempt: _Attempt, error: ProviderError) -> None:
        self.reason = error_code(error)
        if attempt.failed_step_text:
            self.transcript.append(snapshot_entry_text(attempt.failed_step_text, cut_off=True))

    def _discard(self, attempt: _Attempt, error: ProviderError) -> None:
        if attempt.text or attempt.tool_calls:
            self.turn.emit(
                "provider_attempt_discarded",
                attempt=attempt.number,
                model=attempt.model,
                text_chars=len(attempt.text),
                text_bytes=utf8_len(attempt.text),
                tool_calls=attempt.tool_calls,
                code=error_code(error),
            )

    def _detail(self, error: ProviderError) -> str:
        text = self.turn.agent.redact(f"{type(error).__name__}: {error}", "error")
        return text[:ERROR_DETAIL_CHARS]

    async def _attempt(self, attempt: _Attempt, runtime: Any, prompt: AssembledPrompt, stateless: bool) -> StepOutcome:
        turn = self.turn
        hooks = turn.agent.hooks
        self.current = attempt
        messages: list[Message] = [*prompt.messages, *self.resumed]
        failed: tuple[FailedToolCall, ...] = ()
        cut_off: list[str] = []  # replies stopped at the output limit, which the next rounds continue
        continuations = 0
        while True:
            self._check_deadline()
            step = self.steps + 1
            if self.max_turns and step > self.max_turns:  # a retry or backup after the last step
                raise TurnFailed(
                    f"runtime.maxTurns = {self.max_turns} provider steps are used up; nothing was committed "
                    f"(raise runtime.maxTurns, or 0 for unlimited)"
                )
            final = step > 1 and step == self.max_turns
            state = ProviderRound(step, failed, final, continuations if cut_off else 0)
            if state != turn.provider_round:
                refreshed = self._next_round(state, prompt)
                messages = [*refreshed.messages, *messages[len(prompt.messages) :]]
                prompt = refreshed
            choice = turn.request.tool_choice if step == 1 else None  # the run's first step only
            request = ProviderRequest(
                model=attempt.model.partition(":")[2],
                prompt=prompt,
                messages=tuple(messages),
                tools=() if final or choice == "none" else turn.tools,
                run_id=turn.run_id,
                step=step,
                transport=self.transport,
                tool_choice=None if choice in (None, "auto", "none") else choice,
            )
            prepared = hooks.first(hookspecs.prepare_provider_request, turn=turn.view, request=request)
            if prepared is not None and prepared is not request:
                request = _checked_tool_names(prepared)
            try:
                outcome = await self._stream(attempt, runtime, request, stateless)
            except ProviderError as exc:
                smaller = await self._compacted(exc, attempt, prompt)
                if smaller is not None:
                    messages = [*smaller.messages, *messages[len(prompt.messages) :]]
                    prompt = self.prompt = smaller
                    continue
                attempt.failed_step_text = attempt.step_text
                raise _AttemptFailed(exc, attempt) from exc
            self.steps = step
            self.usage = self.usage + outcome.usage
            hooks.collect(hookspecs.after_provider_call, turn=turn.view, request=request, outcome=outcome)
            if not outcome.tool_calls:
                if outcome.stop_reason != MAX_TOKENS or continuations == self.max_continuations or final or step == self.max_turns:
                    return attrs.evolve(outcome, text="".join(cut_off) + outcome.text) if cut_off else outcome
                continuations += 1
                cut_off.append(outcome.text)
                self.transcript.append(snapshot_entry_text(outcome.text, cut_off=True))
                messages.append(Message("assistant", outcome.text.rstrip()))  # a trailing blank is refused as a prefill
                turn.emit("provider_continuation", step=step, continuation=continuations,
                          max_continuations=self.max_continuations, text_bytes=utf8_len(outcome.text))
                failed = ()
                continue
            handed_over = self.tools.client and any(call.name in self.tools.client for call in outcome.tool_calls)
            if self.max_turns and step >= self.max_turns and not handed_over:  # a client call ends the run here
                names = ", ".join(call.name[:64] for call in outcome.tool_calls)
                where = "in the final round, which was sent without tools and asked for an answer" if final else "at the last step"
                raise TurnFailed(
                    f"the model was still calling tools ({names}) {where} (step {step} of runtime.maxTurns = "
                    f"{self.max_turns}); those calls were not run, since no step is left to read their results, and "
                    f"nothing was committed (raise runtime.maxTurns, or 0 for unlimited)"
                )
            cut_off.clear()  # a tool round ends the continuation: the answer is what follows it
            if outcome.text:
                self.transcript.append(snapshot_entry_text(outcome.text, cut_off=False))
            step_message = Message("assistant", outcome.text, tool_calls=outcome.tool_calls, reasoning=outcome.reasoning)
            messages.append(step_message)
            attempt.tool_loop.append(step_message)
            failures = []
            pending: list[ToolCall] = []
            for call in outcome.tool_calls:
                if handed_over and call.name in self.tools.client:
                    answered = await self.tools.handed_over(call)
                    if answered is None:  # the caller runs it: its result comes with the next request
                        pending.append(call)
                        continue
                    result = answered
                else:
                    result = await self.tools.run(call)
                self._check_deadline()
                activity = ToolActivity(call, result)
                self.activity.append(activity)
                attempt.tool_calls += 1
                self.transcript.extend(snapshot_entry_tool(activity))
                result_message = tool_message(call, result)
                messages.append(result_message)
                attempt.tool_loop.append(result_message)
                if result.status.value in RECOVERABLE_TOOL_STATUSES:
                    failures.append(FailedToolCall(call.name, result.status.value))
            if pending:
                attempt.pending = tuple(pending)
                return outcome
            failed = tuple(failures)

    def _next_round(self, state: ProviderRound, prompt: AssembledPrompt) -> AssembledPrompt:
        """The round boundary: record ``state`` on the turn, then re-render the dynamic sections for it.

        Emits ``prompt_refreshed`` (``step``, ``changed``: the section ids that appeared,
        disappeared or changed, and the stable and dynamic fingerprints) when they changed.
        """
        turn = self.turn
        turn.provider_round = state
        refreshed = refresh_dynamic_sections(turn.agent.hooks, turn, prompt)
        if refreshed is not prompt:
            fingerprints = refreshed.manifest.fingerprints
            turn.emit(
                "prompt_refreshed", step=state.step, changed=changed_sections(prompt, refreshed),
                stable_sha256=fingerprints.stable, dynamic_sha256=fingerprints.dynamic,
            )
        return refreshed

    async def _compacted(self, error: ProviderError, attempt: _Attempt, prompt: AssembledPrompt) -> AssembledPrompt | None:
        """The run's one reactive compaction, after a context overflow on the primary's first attempt."""
        if not isinstance(error, ContextLimitError) or attempt.number != 1 or self.compact is None:
            return None
        compact, self.compact = self.compact, None
        return await compact(prompt)

    def _unique_ids(self, calls: list[ToolCall]) -> list[ToolCall]:
        """``calls`` with ids unique in the run: a reused one (in this step or an earlier one) gets
        a ``_2``, ``_3``, ... suffix, in the assistant message and the tool results alike.

        Tool-history record ids derive from the call id, so a second call under a reused id would
        run with no record of its own.
        """
        unique = []
        for call in calls:
            call_id = call.id
            while call_id in self.call_ids:
                self.id_suffixes[call.id] = suffix = self.id_suffixes.get(call.id, 1) + 1
                call_id = f"{call.id}_{suffix}"
            self.call_ids.add(call_id)
            unique.append(call if call_id == call.id else attrs.evolve(call, id=call_id))
        return unique

    def _check_deadline(self) -> None:
        """End the run once its deadline has fired, even if a tool (or runtime) swallowed the cancellation."""
        if self.deadline is not None and self.deadline.expired():
            raise TimeoutError

    async def _stream(self, attempt: _Attempt, runtime: Any, request: ProviderRequest, stateless: bool) -> StepOutcome:
        """One provider step, read by :func:`read_step`; its text streams out as ``text_delta`` events."""
        turn = self.turn
        model = attempt.model
        buffer = attempt.live = io.StringIO()
        turn.emit(
            "provider_request",
            model=model,
            step=request.step,
            attempt=attempt.number,
            stateless=stateless,
            messages=len(request.messages),
            tools=len(request.tools),
            diagnostics={"transport_requested": self.transport},
        )
        if self.cache_diagnostics:
            turn.emit("prompt_cache_diagnostics", model=model, step=request.step, attempt=attempt.number,
                      **cache_fingerprint(request))

        def on_text(text: str) -> None:
            buffer.write(text)
            turn.emit("text_delta", text=text, step=request.step, attempt=attempt.number)

        replaced: dict[str, int] = {}
        reasoning: list[ReasoningBlock] = []
        try:
            calls, finished = await read_step(
                runtime, request, model=model, limits=self.limits, on_text=on_text, replaced=replaced, reasoning=reasoning
            )
        finally:
            turn.report_invalid_unicode("provider", tuple(replaced.items()), model=model, step=request.step)
        calls = self._unique_ids(calls)
        text = buffer.getvalue()
        attempt.texts.append(text)
        attempt.live = None
        outcome = StepOutcome(model, text, tuple(calls), finished.usage, finished.stop_reason, tuple(reasoning))
        sizes = {"reasoning_blocks": len(reasoning), "reasoning_bytes": sum(b.size for b in reasoning)} if reasoning else {}
        turn.emit(
            "provider_response",
            model=model,
            step=request.step,
            attempt=attempt.number,
            stop_reason=finished.stop_reason,
            tool_calls=len(calls),
            usage=attrs.asdict(finished.usage),
            **sizes,
        )
        return outcome
