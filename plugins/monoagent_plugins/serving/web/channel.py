"""The ``web`` channel of ``monoagent serve``: the web console's API, its live events and its page.

Routes are under ``/web`` (the API in /work docs: docs/web.md). Each thread is a conversation whose
id is the thread's ``web:<uuid4>``; each turn is a ``TurnRequest`` with ``channel="web"``,
``delivery="console"``, ``console="web"`` (the session block's console sentence names the thread's
conversation id; the harness applies no daily rollover to a console turn). A thread runs one turn
at a time: a submission sent while it runs is queued (durably, in the console store) and runs next;
different threads run at once under the channel's own harness (``concurrency.*``), an admission
overload answered 429. A browser that disconnects never cancels a turn; ``POST .../cancel`` does
(reason :data:`CANCEL_REASON`). Nothing that answers a submission after its turn was admitted can
fail with a 5xx: the turn's end is recorded by the worker whoever listens.
"""

from __future__ import annotations

import asyncio
import collections
import secrets
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from monoagent import AdmissionRejected, ConfigError, RunEvent, TurnRequest, logger
from monoagent_plugins.serving.channel_runs import ChannelRuns, ShutdownCancelled
from monoagent_plugins.serving.http import RETRY_AFTER_S, authenticated, json_bytes
from monoagent_plugins.serving.serve import ServeConfig
from monoagent_plugins.serving.web.http_parts import (
    CSRF_HEADER,
    PAGE_HEADERS,
    Refused,
    answer,
    body_object,
    content_type,
    cookie_header,
    error,
    origin_ok,
    refusals,
    session_cookie,
    static_file,
    submission_id_of,
    title_of,
    token_ok,
)
from monoagent_plugins.serving.web.live import ActiveTurn, ThreadLive, record_failure_line, tool_line

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from monoagent import Agent
    from monoagent_plugins.serving.web.store import ConsoleStore

CHANNEL = "web"
CANCEL_REASON = "web_cancel"
PLACEHOLDER = (b"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>monoagent web console</title>"
               b"</head><body><p>The web console's page is not installed.</p></body></html>")


class WebChannel:
    """The ``web`` channel: its routes, its harness, its console store and its threads' live state."""

    name = CHANNEL
    credential_hint = "web.tokens or MONO_AGENT_WEB_TOKENS=tok1 (monoagent web makes one)"

    def __init__(self, agent: Agent) -> None:
        from monoagent_plugins.serving.web import WebConfig

        self.agent = agent
        self.settings = agent.config.section("web", WebConfig)
        self.enabled = self.settings.enabled
        self.has_credentials = bool(self.settings.tokens)
        self.runs = ChannelRuns(agent)
        self.store: ConsoleStore | None = None
        self.live: dict[str, ThreadLive] = {}
        self.pending: dict[str, collections.deque[tuple[dict[str, Any], asyncio.Future[Any] | None]]] = {}
        self._serve = agent.config.section("serve", ServeConfig)

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, agent: Agent | None = None) -> None:
        raise NotImplementedError("the web channel is served by `monoagent serve` (or `monoagent web`)")

    def check(self) -> list[str]:
        from monoagent_plugins.serving.web.store import store_path

        return [f"console store: {store_path(self.agent.config.home)}",
                f"page: GET /web/ (sessions last {self.settings.session_ttl_hours} h)"]

    async def start(self) -> None:
        """Open the console store, own it, mark the turns of a gone process interrupted, run what was queued."""
        from monoagent_plugins.serving.web.store import ConsoleStore, ConsoleStoreError

        try:
            self.store = await asyncio.to_thread(ConsoleStore, self.agent.config.home)
            await asyncio.to_thread(self.store.claim)
            interrupted = await asyncio.to_thread(self.store.interrupt_orphans)
            queued = await asyncio.to_thread(self.store.queued_threads)
        except ConsoleStoreError as exc:
            raise ConfigError(str(exc)) from exc
        for thread_id, submission_id, run_id in interrupted:
            logger.warning("web: the turn of submission {} in {} was left running by a server that is gone: interrupted",
                           submission_id, thread_id)
            if run_id is not None:  # its run artifact ends as a cancelled run (what the dead process never wrote)
                self.agent.publish_event(RunEvent("run_cancelled", run_id, thread_id, 0, time.time(), {
                    "reason": "interrupted", "channel": CHANNEL, "reconciled": True,
                    "detail": "the server stopped while this run ran; recorded at the next start"}))
        for thread_id in queued:
            for submission in await asyncio.to_thread(self.store.queued, thread_id):
                self._enqueue(thread_id, submission, wait=False)
            logger.info("web: {} queued submission(s) of {} run now", len(self.pending.get(thread_id, ())), thread_id)

    def stop_accepting(self) -> None:
        self.runs.stop_accepting()
        for live in self.live.values():
            live.close()

    def cancel_in_flight(self) -> int:
        return self.runs.cancel_in_flight()

    async def shutdown(self) -> None:
        await self.runs.shutdown()
        workers = [live.worker for live in self.live.values() if live.worker is not None]
        if workers:
            await asyncio.gather(*workers, return_exceptions=True)
        if self.store is not None:
            await asyncio.to_thread(self.store.release)
            await asyncio.to_thread(self.store.close)

    def routes(self) -> Sequence[Any]:
        from starlette.routing import Route

        return [
            Route("/web", self.page_redirect, methods=["GET"]),
            Route("/web/", self.page, methods=["GET"]),
            Route("/web/api/session", self.session, methods=["GET", "POST", "DELETE"]),
            Route("/web/api/threads", self.threads, methods=["GET", "POST"]),
            Route("/web/api/threads/{thread_id}", self.thread, methods=["GET", "PATCH", "DELETE"]),
            Route("/web/api/threads/{thread_id}/submissions", self.submit, methods=["POST"]),
            Route("/web/api/threads/{thread_id}/cancel", self.cancel, methods=["POST"]),
            Route("/web/api/threads/{thread_id}/events", self.events, methods=["GET"]),
            Route("/web/api/submissions/{submission_id}", self.submission, methods=["GET"]),
            Route("/web/{path:path}", self.asset, methods=["GET"]),
        ]

    # ------------------------------------------------------------------ the page

    async def page_redirect(self, request: Request) -> Response:
        from starlette.responses import RedirectResponse

        return RedirectResponse("/web/", status_code=307)

    async def page(self, request: Request) -> Response:
        from starlette.responses import Response

        index = static_file("index.html")
        body = await asyncio.to_thread(index.read_bytes) if index is not None else PLACEHOLDER
        return Response(body, media_type="text/html; charset=utf-8", headers=PAGE_HEADERS)

    async def asset(self, request: Request) -> Response:
        from starlette.responses import Response

        path = static_file(request.path_params["path"])
        if path is None:
            return error(404, "no such file of the web console", "not_found")
        body = await asyncio.to_thread(path.read_bytes)
        return Response(body, media_type=content_type(path), headers=PAGE_HEADERS)

    # ------------------------------------------------------------------ auth

    def _ready(self) -> ConsoleStore:
        if self.store is None:
            raise Refused(503, "the web console is starting; retry", "starting")
        return self.store

    async def _guard(self, request: Request) -> str:
        """The session's CSRF token; :class:`Refused` 401 without a live session, 403 for a mutating request
        without its ``X-CSRF-Token`` or from another ``Origin``."""
        store = self._ready()
        cookie = session_cookie(request)
        csrf = await asyncio.to_thread(store.session_csrf, cookie) if cookie else None
        if csrf is None:
            raise Refused(401, "sign in first: POST /web/api/session with a token of web.tokens", "unauthenticated")
        if request.method not in ("GET", "HEAD"):
            if not origin_ok(request):
                raise Refused(403, "the request's Origin is not this server's", "bad_origin")
            presented = request.headers.get(CSRF_HEADER) or ""
            if not secrets.compare_digest(presented.encode("utf-8", "replace"), csrf.encode()):
                raise Refused(403, f"missing or wrong {CSRF_HEADER} header (the csrf of GET /web/api/session)", "bad_csrf")
        authenticated(request)
        return csrf

    async def _body(self, request: Request, allowed: tuple[str, ...]) -> dict[str, Any]:
        timeout_s = self._serve.body_timeout_ms / 1000
        return await body_object(request, self._serve.max_body_bytes, timeout_s, allowed)

    @refusals
    async def session(self, request: Request) -> Response:
        if request.method == "POST":
            return await self._sign_in(request)
        csrf = await self._guard(request)
        if request.method == "GET":
            return answer({"csrf": csrf, "agent": {"name": self.settings.title, "model": self.agent.model}})
        await asyncio.to_thread(self._ready().delete_session, session_cookie(request) or "")
        response = answer({"signed_out": True})
        response.headers["Set-Cookie"] = cookie_header(request, "", 0)
        return response

    async def _sign_in(self, request: Request) -> Response:
        store = self._ready()
        if not origin_ok(request):
            raise Refused(403, "the request's Origin is not this server's", "bad_origin")
        body = await self._body(request, ("token",))
        if self.has_credentials and not token_ok(body.get("token"), self.settings.tokens):
            raise Refused(401, "wrong token: use one of web.tokens (monoagent web prints it in the URL)", "bad_token")
        authenticated(request)
        session_id, csrf = secrets.token_urlsafe(32), secrets.token_hex(32)
        ttl_s = self.settings.session_ttl_hours * 3600
        await asyncio.to_thread(store.create_session, session_id, csrf, ttl_s)
        response = answer({"csrf": csrf})
        response.headers["Set-Cookie"] = cookie_header(request, session_id, int(ttl_s))
        return response

    # ------------------------------------------------------------------ threads

    def _live(self, thread_id: str) -> ThreadLive:
        live = self.live.get(thread_id)
        if live is None:
            live = self.live[thread_id] = ThreadLive()
        return live

    def _queued(self, thread_id: str) -> list[dict[str, Any]]:
        """The thread's submissions waiting for their turn (the one just admitted, still being recorded, left out)."""
        live = self.live.get(thread_id)
        running = live.active.submission_id if live is not None and live.active is not None else None
        return [submission for submission, _ in self.pending.get(thread_id, ()) if submission["submission_id"] != running]

    def _state(self, thread_id: str) -> str:
        live = self.live.get(thread_id)
        if live is not None and live.active is not None:
            return "running"
        return "queued" if self.pending.get(thread_id) else "idle"

    def _view(self, thread: dict[str, Any]) -> dict[str, Any]:
        return {**thread, "state": self._state(thread["id"])}

    async def _thread_or_404(self, thread_id: str) -> dict[str, Any]:
        thread = await asyncio.to_thread(self._ready().thread, thread_id)
        if thread is None:
            raise Refused(404, f"no thread {thread_id!r}", "not_found")
        return thread

    def _publish_thread(self, thread: dict[str, Any]) -> None:
        self._live(thread["id"]).publish("thread", {"thread": self._view(thread)})

    @refusals
    async def threads(self, request: Request) -> Response:
        await self._guard(request)
        store = self._ready()
        if request.method == "GET":
            archived = request.query_params.get("archived", "false")
            if archived not in ("true", "false"):
                raise Refused(400, "archived must be true or false", "bad_request")
            listed = await asyncio.to_thread(store.threads, archived == "true")
            return answer({"threads": [self._view(thread) for thread in listed]})
        body = await self._body(request, ("title",))
        title = title_of(body["title"]) if "title" in body else "New thread"
        thread = await asyncio.to_thread(store.create_thread, title)
        return answer(self._view(thread), 201)

    @refusals
    async def thread(self, request: Request) -> Response:
        from starlette.responses import Response

        thread_id = request.path_params["thread_id"]
        await self._guard(request)
        store = self._ready()
        thread = await self._thread_or_404(thread_id)
        if request.method == "GET":
            messages = await asyncio.to_thread(store.messages, thread_id)
            live = self.live.get(thread_id)
            active = live.active.view() if live is not None and live.active is not None else None
            return answer({"thread": self._view(thread), "messages": messages, "active": active,
                           "queued": self._queued(thread_id)})
        if request.method == "DELETE":
            if self._state(thread_id) != "idle":
                raise Refused(409, "the thread runs a turn or has one queued: cancel it and wait, then delete",
                              "thread_running")
            await asyncio.to_thread(store.delete_thread, thread_id)
            return Response(status_code=204, headers={"Cache-Control": "no-store"})
        body = await self._body(request, ("title", "archived"))
        title = title_of(body["title"]) if "title" in body else None
        archived = body.get("archived")
        if archived is not None and not isinstance(archived, bool):
            raise Refused(400, "archived must be true or false", "bad_request")
        updated = await asyncio.to_thread(store.update_thread, thread_id, title, archived)
        if updated is None:
            raise Refused(404, f"no thread {thread_id!r}", "not_found")
        self._publish_thread(updated)
        return answer(self._view(updated))

    # ------------------------------------------------------------------ submissions and turns

    @refusals
    async def submission(self, request: Request) -> Response:
        await self._guard(request)
        found = await asyncio.to_thread(self._ready().submission, request.path_params["submission_id"])
        if found is None:
            raise Refused(404, f"no submission {request.path_params['submission_id']!r}", "not_found")
        return answer(found)

    @refusals
    async def submit(self, request: Request) -> Response:
        """Record a submission (its receipt), then run it now (an idle thread) or queue it behind the running turn."""
        thread_id = request.path_params["thread_id"]
        await self._guard(request)
        store = self._ready()
        body = await self._body(request, ("submission_id", "text"))
        submission_id = submission_id_of(body.get("submission_id"))
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            raise Refused(400, "text must be a non-empty string (the message to send)", "bad_request")
        if not self.runs.accepting:
            raise Refused(503, "the server is stopping; retry once it is back", "stopping")
        submitted = await asyncio.to_thread(store.submit, submission_id, thread_id, text)
        if submitted.outcome == "no_thread":
            raise Refused(404, f"no thread {thread_id!r}", "not_found")
        if submitted.outcome == "conflict":
            raise Refused(409, f"submission {submission_id} was first sent with another text or thread; a new Send "
                               f"needs a new submission_id", "submission_conflict")
        if submitted.outcome == "known":
            return answer(submitted.submission)
        submission = submitted.submission
        assert submission is not None
        admitted = self._enqueue(thread_id, submission, wait=True)
        if admitted is None:  # behind the running turn
            self._live(thread_id).publish("queued", {"submission": submission})
            return answer(submission, 202)
        try:
            active = await asyncio.shield(admitted)
        except AdmissionRejected as exc:
            return error(429, f"{exc}; retry later", "overloaded", {"Retry-After": str(RETRY_AFTER_S)})
        except Exception as exc:  # the server stopping (ShutdownCancelled), the store failing
            return error(503, f"the turn could not start ({type(exc).__name__}): {exc}; retry", "stopping")
        return answer({**submission, "state": "running", "run_id": active.run_id}, 202)

    def _enqueue(self, thread_id: str, submission: dict[str, Any], *, wait: bool) -> asyncio.Future[Any] | None:
        """Queue ``submission`` on its thread and make sure the thread's worker runs. Returns a future of its
        :class:`ActiveTurn` when it starts at once (the thread was idle and ``wait``), else None (queued)."""
        live = self._live(thread_id)
        queue = self.pending.setdefault(thread_id, collections.deque())
        idle = live.worker is None and not queue
        admitted = asyncio.get_running_loop().create_future() if wait and idle else None
        if admitted is not None:  # its Send may have gone away meanwhile: its refusal is then nobody's to retrieve
            admitted.add_done_callback(lambda done: done.cancelled() or done.exception())
        queue.append((submission, admitted))
        if live.worker is None:
            live.worker = asyncio.create_task(self._work(thread_id), name=f"web {thread_id}")
        return admitted

    async def _work(self, thread_id: str) -> None:
        """Run the thread's queued submissions one after another (one turn at a time)."""
        live = self._live(thread_id)
        queue = self.pending[thread_id]
        try:
            while queue:
                submission, admitted = queue[0]
                if not self.runs.accepting:
                    return  # the server stops: the rest stay queued in the store, the next start runs them
                try:
                    await asyncio.to_thread(self._ready().start, submission["submission_id"])
                except Exception as exc:  # the store refused: nothing was dispatched
                    logger.error("web: submission {} could not be dispatched: {}", submission["submission_id"], exc)
                    queue.popleft()
                    if admitted is not None:
                        admitted.set_exception(exc)
                    continue
                try:
                    active = await self._begin(thread_id, submission)
                except AdmissionRejected as exc:
                    if admitted is None:  # a queued follow-up waits for room in the harness, still queued
                        await asyncio.to_thread(self._ready().requeue, submission["submission_id"])
                        await asyncio.sleep(RETRY_AFTER_S)
                        continue
                    queue.popleft()  # its Send is answered 429 and may be sent again
                    await asyncio.to_thread(self._ready().unstart, submission["submission_id"])
                    admitted.set_exception(exc)
                    continue
                except Exception as exc:  # the server stopping, a bad request
                    queue.popleft()
                    if admitted is not None:  # its Send is answered 429 (or 503) and may be sent again
                        await asyncio.to_thread(self._ready().unstart, submission["submission_id"])
                        admitted.set_exception(exc)
                    elif isinstance(exc, ShutdownCancelled):
                        await self._record_end(thread_id, submission["submission_id"], None, "interrupted",
                                               {"text": "", "error": "the server stopped as this turn started"})
                    else:
                        await self._record_end(thread_id, submission["submission_id"], None, "failed",
                                               {"text": "", "error": f"the turn could not start: {type(exc).__name__}: {exc}"})
                    continue
                queue.popleft()
                if admitted is not None:
                    admitted.set_result(active)
                await self._run(thread_id, active)
        finally:
            live.worker = None
            if not queue:
                self.pending.pop(thread_id, None)

    async def _begin(self, thread_id: str, submission: dict[str, Any]) -> ActiveTurn:
        """Submit the turn of ``submission`` to the channel's harness and wait until it is admitted (its
        ``run_started``): from then on it is the thread's active turn. Raises what refused it (``AdmissionRejected``)."""
        live = self._live(thread_id)
        loop = asyncio.get_running_loop()
        active = ActiveTurn(submission["submission_id"], "")
        request = TurnRequest(submission["text"], conversation_id=thread_id, channel=CHANNEL, delivery="console",
                              console="web", metadata={"source": "web", "submission_id": submission["submission_id"]})

        def on_event(event: Any) -> None:
            if event.type in ("run_started", "text_delta", "tool_call", "tool_result"):
                loop.call_soon_threadsafe(self._on_event, live, active, event)

        handle = self.runs.submit(request, on_event=on_event)
        active.run_id, active.handle = handle.run_id, handle
        active.outcome = asyncio.ensure_future(self.runs.finish(handle))
        started = asyncio.ensure_future(active.admitted.wait())
        await asyncio.wait({started, active.outcome}, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        if not active.admitted.is_set():  # refused before it started: the outcome holds why
            active.outcome.result()
            raise ShutdownCancelled("the turn ended before it started")
        try:
            await asyncio.to_thread(self._ready().started, active.submission_id, active.run_id)
        except Exception as exc:  # the store refused: the turn runs on; its end is recorded if the store comes back
            logger.error("web: the run id of submission {} could not be recorded: {}", active.submission_id, exc)
        thread = await asyncio.to_thread(self._ready().thread, thread_id)
        if thread is not None:
            self._publish_thread(thread)
        return active

    def _on_event(self, live: ThreadLive, active: ActiveTurn, event: Any) -> None:
        """One event of ``active``'s run, on the loop, in the order the run emitted them."""
        if event.type == "run_started":  # admitted: the thread's active turn from now on
            live.active = active
            live.publish("turn_started", {"submission_id": active.submission_id, "run_id": active.run_id})
            active.admitted.set()
            return
        if live.active is not active:
            return
        if event.type == "text_delta":
            text = str(event.data.get("text", ""))
            active.text += text
            live.publish("text", {"run_id": active.run_id, "text": text})
            return
        call_id = str(event.data.get("id", ""))
        line = tool_line(event.type, event.data, active.tools.get(call_id))
        active.tools[call_id] = line
        live.publish("tool", {"run_id": active.run_id, "tool": line})
        failure = record_failure_line(event.type, event.data)
        if failure is not None:
            active.tools[failure["id"]] = failure
            live.publish("tool", {"run_id": active.run_id, "tool": failure})

    async def _run(self, thread_id: str, active: ActiveTurn) -> None:
        """Wait for the active turn's outcome and record it as the thread's assistant message."""
        message: dict[str, Any] = {}
        try:
            result = await active.outcome
        except ShutdownCancelled:
            if active.cancel_reason is not None:
                state, message["error"] = "cancelled", "cancelled from the web console"
            else:
                state, message["error"] = "interrupted", "the server stopped while this turn ran"
        except Exception as exc:
            state = "failed"
            message["error"] = self.agent.redact(f"{type(exc).__name__}: {exc}", "error")
            logger.warning("web: the turn of submission {} failed: {}", active.submission_id, message["error"])
        else:
            state = "completed"
            message.update(text=result.text, model=result.model,
                           usage={"input_tokens": result.usage.input_tokens, "output_tokens": result.usage.output_tokens})
        message = {"text": active.text, "tools": list(active.tools.values()), **message}  # the events came before
        await self._record_end(thread_id, active.submission_id, active, state, message)

    async def _record_end(self, thread_id: str, submission_id: str, active: ActiveTurn | None, state: str,
                          message: dict[str, Any]) -> None:
        live = self._live(thread_id)
        try:
            stored = await asyncio.to_thread(self._ready().finish, submission_id, state, message)
        except Exception as exc:
            logger.error("web: the end of submission {} could not be recorded: {}", submission_id, exc)
            stored = {"id": None, "role": "assistant", "created_at": time.time(), "submission_id": submission_id,
                      "run_id": active.run_id if active else None, "status": state, "model": None, "usage": None,
                      "error": None, "tools": [], **message}
        if active is not None and live.active is active:
            live.active = None
        live.publish("turn_finished", {"submission_id": submission_id, "run_id": stored.get("run_id"), "message": stored})
        thread = await asyncio.to_thread(self._ready().thread, thread_id)
        if thread is not None:
            self._publish_thread(thread)

    @refusals
    async def cancel(self, request: Request) -> Response:
        thread_id = request.path_params["thread_id"]
        await self._guard(request)
        await self._thread_or_404(thread_id)
        live = self.live.get(thread_id)
        active = live.active if live is not None else None
        cancelled = False
        if active is not None and active.handle is not None and active.cancel_reason is None:
            active.cancel_reason = CANCEL_REASON
            cancelled = bool(active.handle.cancel(CANCEL_REASON))
        return answer({"cancelled": cancelled}, 202)

    # ------------------------------------------------------------------ live events

    @refusals
    async def events(self, request: Request) -> Response:
        """The thread's Server-Sent Events: a ``snapshot`` (the state as of its id), then every later event."""
        from starlette.responses import StreamingResponse

        thread_id = request.path_params["thread_id"]
        await self._guard(request)
        thread = await self._thread_or_404(thread_id)
        if not self.runs.accepting:
            return error(503, "the server is stopping", "stopping")
        live = self._live(thread_id)
        queue = live.subscribe()
        snapshot_id = live.last_id  # the snapshot below is taken with no await in between: it holds what came before
        snapshot = {"thread": self._view(thread), "active": live.active.view() if live.active is not None else None,
                    "queued": self._queued(thread_id)}
        keepalive_s = self.settings.keepalive_seconds

        async def stream() -> AsyncIterator[bytes]:
            try:
                yield _sse(snapshot_id, "snapshot", snapshot)
                while True:
                    try:
                        item = await asyncio.wait_for(queue.get(), keepalive_s)
                    except TimeoutError:
                        yield b": keepalive\n\n"
                        continue
                    if item is None:
                        return
                    if item[0] > snapshot_id:
                        yield _sse(*item)
            finally:
                live.unsubscribe(queue)  # a browser that goes away leaves its turn running

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


def _sse(event_id: int, kind: str, data: Any) -> bytes:
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (event_id, kind.encode(), json_bytes(data))
