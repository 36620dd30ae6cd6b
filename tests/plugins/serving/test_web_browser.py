"""The web console's page in a real browser: Playwright driving Debian's Chromium against a real ``monoagent serve``.

Chromium is launched by its path (no browser download is possible here); without /usr/bin/chromium, or
without the ``playwright`` package, the module skips, unless MONOAGENT_REQUIRE_BROWSER=1 (.ci/run sets it),
which turns the skip into a failure. Every wait is Playwright's own (``expect`` polls until its condition
holds or fails the test); the model is :data:`GATED`, which writes each piece of a "gated" answer only when
the test writes its gate file, so a test decides when the stream moves on. The screenshots of the main views
are written to docs/images/web-*.png by this run (docs/web-page.md shows them); axe-core (tests/data/axe-core,
never served) checks the main views for serious or critical accessibility violations.
"""

from __future__ import annotations

import json
import os
import re
import signal
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import Server, serve_env, serve_once

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WEB_TOKEN = "web-token-1"
ROOT = Path(__file__).resolve().parents[3]
IMAGES = ROOT / "docs" / "images"
AXE = ROOT / "tests" / "data" / "axe-core" / "axe.min.js"


def _missing() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install -y chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


if (_why := _missing()) is not None:
    if os.environ.get("MONOAGENT_REQUIRE_BROWSER") == "1":
        raise RuntimeError(f"MONOAGENT_REQUIRE_BROWSER=1 but {_why}")
    pytest.skip(f"the browser tests need Chromium and Playwright: {_why}", allow_module_level=True)

from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright  # noqa: E402

# A provider "gated" and the tool "clock". A message starting with "gated" is answered piece by piece: the
# n-th gated turn of the process writes ``started-<n>`` in its working directory, then, for k = 1, 2, ...,
# waits for the file ``gate-<n>-<k>`` and streams its text, until a gate holds "END". A message naming the
# clock calls the tool ``clock`` and then answers with its result ("broken": the tool ``broken``, which fails);
# one naming "explode" makes the provider raise. Anything else is answered with
# "You said: " and the message itself (so a test can make the model's text hostile).
GATED = r'''
import asyncio
import itertools
from pathlib import Path

from monoagent import StepFinished, TextDelta, ToolCall, ToolCallRequested, ToolSpec, hookimpl

TURNS = itertools.count(1)


class Gated:
    name = "gated"

    async def stream(self, request):
        messages = request.messages
        user = [m for m in messages if m.role == "user"][-1].content.rsplit("\n\n", 1)[-1]  # after the runtime facts
        if messages[-1].role == "tool":
            said = "The clock says " if messages[-1].tool_call_id == "call_clock_1" else "The tool answered: "
            yield TextDelta(said + messages[-1].content + ".")
            yield StepFinished()
            return
        if user.startswith("gated"):
            turn = next(TURNS)
            Path(f"started-{turn}").write_text("1")
            for k in itertools.count(1):
                gate = Path(f"gate-{turn}-{k}")
                while not gate.exists():
                    await asyncio.sleep(0.01)
                piece = gate.read_text()
                if piece == "END":
                    break
                yield TextDelta(piece)
            yield StepFinished()
            return
        if "explode" in user:
            raise RuntimeError("the model broke down")
        if "broken" in user:
            yield ToolCallRequested(ToolCall("call_broken_1", "broken", {"path": "/tmp/x"}))
            yield StepFinished("tool_use")
            return
        if "clock" in user:
            yield TextDelta("Asking the clock.")
            yield ToolCallRequested(ToolCall("call_clock_1", "clock", {}))
            yield StepFinished("tool_use")
            return
        yield TextDelta("You said: " + user)
        yield StepFinished()


@hookimpl
def register_providers(register):
    register("gated", lambda agent, model: Gated())


@hookimpl
def register_tools(register):
    register(ToolSpec("clock", "The server's clock.", {"type": "object"}), lambda context: "12:00")
    register(ToolSpec("broken", "A tool that always fails.", {"type": "object"}), broken)


def broken(context):
    raise RuntimeError("disk on fire")
'''


class Console:
    """A ``monoagent serve`` with the web channel and the :data:`GATED` model, in ``tmp_path``."""

    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path
        (tmp_path / "plugins").mkdir()
        (tmp_path / "plugins" / "gated_provider.py").write_text(GATED, encoding="utf-8")
        (tmp_path / "monoagent.toml").write_text('[runtime]\nmodel = "gated:x"\n', encoding="utf-8")
        self.server = self.start()
        self.url = self.server.url

    def env(self, port: int = 0) -> dict[str, str]:
        return serve_env(self.dir, MONO_AGENT_WEB_ENABLED="1", MONO_AGENT_WEB_TOKENS=WEB_TOKEN,
                         MONO_AGENT_SERVE_PORT=str(port))

    def start(self, port: int = 0) -> Server:
        return Server(self.dir, "--plugins-dir", "plugins", env=self.env(port))

    def restart(self) -> None:
        """Start the server again on the same port (the page keeps its address); the old one must have ended."""
        port = int(self.url.rsplit(":", 1)[1].strip("/"))
        self.server = self.start(port)
        assert self.server.url == self.url

    def gate(self, turn: int, k: int, text: str) -> None:
        """Let the ``turn``-th gated answer write its ``k``-th piece (``"END"`` ends it)."""
        path = self.dir / f"gate-{turn}-{k}"
        path.with_suffix(".tmp").write_text(text, encoding="utf-8")
        path.with_suffix(".tmp").replace(path)

    def started(self, turn: int) -> bool:
        return (self.dir / f"started-{turn}").exists()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def console(tmp_path: Path) -> Iterator[Console]:
    served = Console(tmp_path)
    yield served
    served.server.terminate()


@pytest.fixture
def context(browser: Browser, console: Console) -> Iterator[BrowserContext]:
    """A browser context on the console; at the end, no script error, CSP violation or request to another origin."""
    made = browser.new_context(base_url=console.url, viewport={"width": 1200, "height": 800})
    made.set_default_timeout(20_000)
    errors: list[str] = []
    foreign: list[str] = []
    watch(made, errors, foreign, console.url)
    yield made
    made.close()
    assert not foreign, f"requests to other origins: {foreign}"
    assert not errors, errors


def watch(context: BrowserContext, errors: list[str], foreign: list[str], origin: str) -> None:
    """Collect the context's script errors and console errors (a CSP violation is one), and every request that
    leaves the server's origin. The console's note of a failed HTTP request is no error of the page's: the
    sign-in view probes the session (401), a reload asks about a submission the server may not know (404)."""
    context.on("weberror", lambda error: errors.append(f"error: {error.error}"))
    context.on("console", lambda msg: errors.append(f"console: {msg.text}")
               if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
    context.on("request", lambda req: foreign.append(req.url)
               if not req.url.startswith(origin) and not req.url.startswith("data:") else None)


def signed_in(context: BrowserContext, console: Console) -> Page:
    """A page opened with the token link ``monoagent web`` prints: signed in, the token gone from the address bar."""
    page = context.new_page()
    page.goto(f"/web/#token={WEB_TOKEN}")
    expect(page.get_by_role("button", name="New thread").first).to_be_visible()
    assert "token" not in page.url
    return page


def new_thread(page: Page) -> str:
    page.get_by_role("navigation", name="Threads").get_by_role("button", name="New thread").click()
    expect(page.get_by_role("textbox", name="Message", exact=True)).to_be_visible()
    expect(page).to_have_url(re.compile(r"#thread=web"))
    return page.url.split("#thread=")[1].replace("%3A", ":")


def send(page: Page, text: str) -> None:
    page.get_by_role("textbox", name="Message", exact=True).fill(text)
    page.get_by_role("button", name=re.compile("^(Send|Queue)$")).click()


def answers(page: Page):
    return page.locator("article.msg-assistant:not(.msg-active)")


def shot(page: Page, name: str) -> None:
    """docs/images/web-<name>.png of the page as it is; the times it shows are masked (they change every run), and the
    file is written only when the picture changed, so a run leaves the tree clean unless the page's look changed."""
    IMAGES.mkdir(parents=True, exist_ok=True)
    picture = page.screenshot(mask=[page.locator("time")], mask_color="#d0d4da", animations="disabled", caret="hide")
    path = IMAGES / f"web-{name}.png"
    if not path.exists() or _changed(path.read_bytes(), picture):
        path.write_bytes(picture)


def _changed(old: bytes, new: bytes) -> bool:
    """Whether two PNG screenshots differ by more than anti-aliasing: another size, or over 0.1 % of their bytes."""
    def raster(png: bytes) -> tuple[bytes, bytes]:
        chunks, at = [], 8
        while at < len(png):
            length = int.from_bytes(png[at:at + 4], "big")
            if png[at + 4:at + 8] == b"IDAT":
                chunks.append(png[at + 8:at + 8 + length])
            at += 12 + length
        return png[16:24], zlib.decompress(b"".join(chunks))

    (old_size, old_pixels), (new_size, new_pixels) = raster(old), raster(new)
    return old_size != new_size or sum(a != b for a, b in zip(old_pixels, new_pixels, strict=True)) > len(new_pixels) // 1000


def axe(page: Page, view: str) -> None:
    """Run axe-core on the page as it is; a serious or critical violation fails the test, naming it."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE.read_text(encoding="utf-8"))  # evaluated by the driver: the page's CSP (rightly) refuses a script tag
    result = page.evaluate("async () => { const r = await axe.run(document); return r.violations.map(v => "
                           "({id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.map(n => n.target.join(' '))})); }")
    bad = [v for v in result if v["impact"] in ("serious", "critical")]
    assert not bad, f"accessibility violations on the {view} view: {json.dumps(bad, indent=1)}"


def csrf(context: BrowserContext) -> str:
    return context.request.get("/web/api/session").json()["csrf"]


def test_sign_in_send_and_hostile_markdown(browser: Browser, console: Console, context: BrowserContext) -> None:
    errors: list[str] = []
    foreign: list[str] = []
    anonymous = browser.new_context(base_url=console.url)
    watch(anonymous, errors, foreign, console.url)
    try:
        page = anonymous.new_page()
        page.goto("/web/")
        expect(page.get_by_label("Access token")).to_be_focused()
        page.get_by_label("Access token").fill("wrong-token")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_contain_text("refused")
        shot(page, "signin")
        axe(page, "sign-in")
        page.get_by_label("Access token").fill(WEB_TOKEN)
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    finally:
        anonymous.close()

    page = signed_in(context, console)
    new_thread(page)
    hostile = ("Hello **bold** <img src=x onerror=\"document.title='pwned'\"> <script>document.title='pwned'</script> "
               "[evil](javascript:document.title='pwned') [site](https://example.com/x) "
               "![pic](https://example.com/tracker.png) <a href=\"https://example.com/raw\">raw</a>")
    send(page, hostile)
    answer = answers(page).last
    expect(answer).to_contain_text("You said: Hello")
    expect(answer.locator("strong")).to_have_text("bold")
    expect(answer).to_contain_text("<script>")  # raw HTML is shown as text
    assert answer.locator("img, script, iframe").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    expect(answer.locator("a", has_text="evil")).to_have_count(0)  # a refused link is plain text
    expect(answer).to_contain_text("evil")
    site = answer.get_by_role("link", name="site")
    expect(site).to_have_attribute("href", "https://example.com/x")
    expect(site).to_have_attribute("target", "_blank")
    expect(site).to_have_attribute("rel", "noopener noreferrer")
    expect(answer.locator("a", has_text="image: pic")).to_have_attribute("href", "https://example.com/tracker.png")
    expect(answer.locator(".meta")).to_contain_text("gated:x")
    expect(answer.locator(".meta")).to_contain_text("tokens")
    assert document_title_safe(page)
    send(page, "What does the clock say?")
    answer = answers(page).nth(1)
    expect(answer).to_contain_text("The clock says 12:00.")
    expect(page.get_by_role("button", name="Cancel")).to_be_hidden()
    expect(page.locator("article.msg-user")).to_have_count(2)
    shot(page, "chat")
    axe(page, "chat")
    expect(answer.locator(".tool")).to_have_count(1)  # the finished answer keeps its tool line
    expect(answer.locator(".tool .tool-name")).to_have_text("clock")
    expect(answer.locator(".tool")).to_have_attribute("data-status", "success")
    send(page, "Use the broken tool")
    answer = answers(page).nth(2)
    expect(answer).to_contain_text("The tool answered:")
    failed = answer.locator(".tool")
    expect(failed).to_have_count(1)
    expect(failed).to_contain_text("broken(path=")
    expect(failed).to_have_attribute("data-status", "error")
    expect(failed).to_contain_text("disk on fire")  # the failure, with its reason, on one line
    assert not foreign, f"requests to other origins: {foreign}"
    assert not errors, errors


def document_title_safe(page: Page) -> bool:
    return "pwned" not in page.title()


def test_stream_reload_and_cancel(console: Console, context: BrowserContext) -> None:
    page = signed_in(context, console)
    posts: list[str] = []
    page.on("request", lambda req: posts.append(req.url) if req.method == "POST" and "/submissions" in req.url else None)
    new_thread(page)
    send(page, "gated: tell me a story")
    active = page.locator("article.msg-active")
    expect(active).to_be_visible()
    expect(page.get_by_role("button", name="Cancel")).to_be_visible()
    console.gate(1, 1, "Once upon a time, ")
    expect(active).to_contain_text("Once upon a time,")
    console.gate(1, 2, "there was a **page**")
    expect(active.locator("strong")).to_have_text("page")  # the pieces arrive one by one, rendered as they come
    shot(page, "streaming")
    axe(page, "streaming answer")
    assert len(posts) == 1

    page.reload()  # a reload never ends the turn: the answer so far comes back, and the rest of the stream follows
    active = page.locator("article.msg-active")
    expect(active).to_contain_text("Once upon a time, there was a page")
    console.gate(1, 3, " that kept going.")
    expect(active).to_contain_text("that kept going.")
    assert len(posts) == 1, "a reload posted the submission again"
    pending = page.evaluate("() => JSON.parse(sessionStorage.getItem('monoagent.web.pending') || '{}')")
    assert len(pending) == 1, pending  # the submission is kept until its receipt is final

    page.get_by_role("button", name="Cancel").click()
    answer = answers(page).last
    expect(answer).to_have_attribute("data-status", "cancelled")
    expect(answer.locator(".error")).to_contain_text("Cancelled")
    expect(answer).to_contain_text("Once upon a time")
    expect(page.get_by_role("button", name="Cancel")).to_be_hidden()
    pending = page.evaluate("() => JSON.parse(sessionStorage.getItem('monoagent.web.pending') || '{}')")
    assert pending == {}

    send(page, "after the cancel")  # the thread is usable again
    expect(answers(page).last).to_contain_text("You said: after the cancel")
    send(page, "explode, please")  # a failed turn is shown as an error
    expect(answers(page)).to_have_count(3)
    expect(answers(page).last).to_have_attribute("data-status", "failed")
    expect(answers(page).last.locator(".error")).to_contain_text("Failed")
    expect(page.get_by_role("status")).to_contain_text("failed")


def test_two_tabs_never_two_answers_at_once(console: Console, context: BrowserContext) -> None:
    first = signed_in(context, console)
    thread = new_thread(first)
    second = context.new_page()
    second.goto(f"/web/#thread={thread}")
    expect(second.get_by_role("textbox", name="Message", exact=True)).to_be_visible()

    send(first, "gated: the first answer")
    expect(second.locator("article.msg-active")).to_be_visible()  # the other tab sees the turn run
    send(second, "gated: the follow-up")
    expect(second.locator("article.msg-queued")).to_contain_text("gated: the follow-up")
    expect(first.locator("article.msg-queued")).to_be_visible()
    console.gate(1, 1, "first piece")
    for page in (first, second):
        expect(page.locator("article.msg-active")).to_have_count(1)
        expect(page.locator("article.msg-active")).to_contain_text("first piece")
    assert not console.started(2), "the follow-up started while the first answer ran"
    shot(second, "queued")
    axe(second, "queued follow-up")

    console.gate(1, 2, "END")
    for page in (first, second):
        expect(answers(page).first).to_contain_text("first piece")
        expect(page.locator("article.msg-active")).to_have_count(1)
    console.gate(2, 1, "second answer")
    console.gate(2, 2, "END")
    for page in (first, second):
        expect(answers(page)).to_have_count(2)
        expect(answers(page).last).to_contain_text("second answer")
        expect(page.locator("article.msg-active")).to_have_count(0)
        expect(page.locator("article.msg-queued")).to_have_count(0)


def test_same_submission_twice_is_one_turn(console: Console, context: BrowserContext) -> None:
    page = signed_in(context, console)
    thread = new_thread(page)
    submission = str(uuid.uuid4())
    headers = {"X-CSRF-Token": csrf(context)}
    body = {"submission_id": submission, "text": "only once"}
    url = f"/web/api/threads/{thread}/submissions"
    first = context.request.post(url, data=body, headers=headers)
    again = context.request.post(url, data=body, headers=headers)
    assert first.status == 202 and again.status == 200, (first.status, again.status)
    assert again.json()["submission_id"] == submission
    expect(answers(page)).to_have_count(1)
    expect(answers(page).first).to_contain_text("You said: only once")
    page.reload()
    expect(answers(page)).to_have_count(1)
    expect(page.locator("article.msg-user")).to_have_count(1)


def test_rename_archive_unarchive_delete(console: Console, context: BrowserContext) -> None:
    page = signed_in(context, console)
    thread = new_thread(page)
    box = page.get_by_role("textbox", name="Message", exact=True)
    expect(box).to_be_focused()  # a new thread puts the cursor where you write
    box.press_sequentially("hello")
    box.press("Shift+Enter")  # a new line, not a Send
    box.press_sequentially("there")
    expect(box).to_have_value("hello\nthere")
    box.press("Enter")  # Enter sends
    expect(answers(page)).to_have_count(1)
    expect(answers(page).first).to_contain_text("You said: hello")
    expect(box).to_have_value("")
    page.get_by_role("button", name="Rename").click()
    page.get_by_label("Thread title").fill("Trip planning")
    page.get_by_role("button", name="Save").click()
    nav = page.get_by_role("navigation", name="Threads")
    expect(page.get_by_role("heading", name="Trip planning")).to_be_visible()
    expect(nav.get_by_role("link", name=re.compile("Trip planning"))).to_be_visible()
    shot(page, "threads")
    axe(page, "thread list")

    page.get_by_role("button", name="Archive", exact=True).click()
    expect(nav.get_by_role("link", name=re.compile("Trip planning"))).to_have_count(0)
    nav.get_by_role("button", name="Archived").click()
    expect(nav.get_by_role("link", name=re.compile("Trip planning"))).to_be_visible()
    axe(page, "archived threads")
    page.get_by_role("button", name="Unarchive").click()
    expect(nav.get_by_role("link", name=re.compile("Trip planning"))).to_have_count(0)
    nav.get_by_role("button", name="Active").click()
    expect(nav.get_by_role("link", name=re.compile("Trip planning"))).to_be_visible()

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete").click()
    expect(nav.get_by_role("link", name=re.compile("Trip planning"))).to_have_count(0)
    assert context.request.get(f"/web/api/threads/{thread}").status == 404


def test_phone_width(browser: Browser, console: Console) -> None:
    phone = browser.new_context(base_url=console.url, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    try:
        page = signed_in(phone, console)
        toggle = page.get_by_role("button", name="Threads")
        expect(toggle).to_be_visible()
        expect(page.get_by_role("navigation", name="Threads")).to_be_hidden()
        toggle.click()
        nav = page.get_by_role("navigation", name="Threads")
        expect(nav).to_be_visible()
        nav.get_by_role("button", name="New thread").click()
        expect(nav).to_be_hidden()  # the list gives the screen back to the chat
        send(page, "Hello from a **phone**")
        expect(answers(page).first.locator("strong")).to_have_text("phone")
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, f"the page is {width}px wide on a 390px screen"
        shot(page, "phone")
        axe(page, "phone chat")
    finally:
        phone.close()


def test_sigkill_mid_turn_restart_and_reset(console: Console, context: BrowserContext) -> None:
    page = signed_in(context, console)
    new_thread(page)
    send(page, "gated: a long answer")
    console.gate(1, 1, "half of it")
    expect(page.locator("article.msg-active")).to_contain_text("half of it")

    console.server.process.send_signal(signal.SIGKILL)
    console.server.process.wait()
    console.server.client.close()
    console.restart()  # the page, left open, reconnects by itself
    answer = answers(page).last
    expect(answer).to_have_attribute("data-status", "interrupted", timeout=30_000)
    expect(answer.locator(".error")).to_contain_text("Interrupted")
    expect(page.locator("article.msg-active")).to_have_count(0)
    expect(page.get_by_role("button", name="Cancel")).to_be_hidden()
    send(page, "after the restart")  # the thread is usable
    expect(answers(page).last).to_contain_text("You said: after the restart")

    assert console.server.terminate() == 0
    reset = serve_once(console.dir, "--plugins-dir", "plugins", "web", "reset", "--all", "--yes", env=console.env())
    assert reset.returncode == 0, reset.stdout + reset.stderr
    console.restart()
    page.reload()  # the console store is gone, and with it the session: the page asks for the token again
    expect(page.get_by_label("Access token")).to_be_visible()
    page.get_by_label("Access token").fill(WEB_TOKEN)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("navigation", name="Threads").get_by_text("No threads yet.")).to_be_visible()


def test_a_submission_the_server_never_got_is_offered_again_under_its_id(console: Console, context: BrowserContext) -> None:
    page = signed_in(context, console)
    thread = new_thread(page)
    posts: list[str] = []
    page.on("request", lambda req: posts.append(req.post_data or "") if req.method == "POST" and "/submissions" in req.url else None)
    lost = str(uuid.uuid4())  # as if the tab had been closed between remembering a Send and posting it
    page.evaluate("([id, thread]) => sessionStorage.setItem('monoagent.web.pending', JSON.stringify({[id]: "
                  "{thread_id: thread, text: 'never arrived', created_at: 1, state: 'sending'}}))", [lost, thread])
    page.reload()
    article = page.locator("article.msg-lost")
    expect(article).to_contain_text("never arrived")
    expect(article).to_contain_text("Not received")
    assert posts == [], "the page posted a remembered submission by itself"
    article.get_by_role("button", name="Send again").click()
    expect(answers(page).last).to_contain_text("You said: never arrived")
    assert [json.loads(body)["submission_id"] for body in posts] == [lost]
    expect(page.locator("article.msg-lost")).to_have_count(0)


# Markdown a model might be made to write (by a web page, a tool result, a document it read): each must come out
# as inert text and safe links. markdown.js is imported into the signed-in page itself (same origin, its CSP).
HOSTILE_MARKDOWN = [
    "<script>window.__pwned = 1</script>",
    "<img src=x onerror=window.__pwned=1>",
    "<svg><script>window.__pwned=1</script></svg>",
    "<svg onload=window.__pwned=1>",
    "<iframe src=\"javascript:window.__pwned=1\"></iframe>",
    "<details open ontoggle=window.__pwned=1>x</details>",
    "<a href=\"javascript:window.__pwned=1\">raw link</a>",
    "[md link](javascript:window.__pwned=1)",
    "[spaced](  javascript:window.__pwned=1 )",
    "[encoded](jav&#x61;script:window.__pwned=1)",
    "[tabbed](java\tscript:window.__pwned=1)",
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[vb](vbscript:msgbox(1))",
    "[relative](/web/api/session)",
    "[proto](//evil.example/x)",
    "<https://example.com/auto>",
    "![tracker](https://evil.example/pixel.png)",
    "![x](javascript:window.__pwned=1)",
    "<style>body{display:none}</style>",
    "<form action=https://evil.example><button>go</button></form>",
    "<input autofocus onfocus=window.__pwned=1>",
    "<math><mtext><table><mglyph><style><img src=x onerror=window.__pwned=1>",
    "<p style=\"position:fixed;top:0\">overlay</p>",
    "```html\n<script>window.__pwned=1</script>\n```",
    "| a | b |\n|---|---|\n| <img src=x onerror=window.__pwned=1> | [t](javascript:window.__pwned=1) |",
    "<a href=\"https://example.com\" target=\"_self\" onclick=\"window.__pwned=1\">click</a>",
    "[mail](mailto:someone@example.com)",
]

CHECK_MARKDOWN = """async (cases) => {
  const { renderMarkdown } = await import("/web/markdown.js");
  const problems = [];
  for (const text of cases) {
    const box = document.createElement("div");
    box.append(renderMarkdown(text));
    document.body.append(box);
    for (const el of box.querySelectorAll("*")) {
      const tag = el.tagName.toLowerCase();
      if (["script", "style", "iframe", "img", "svg", "math", "form", "input", "button", "details", "object", "embed"].includes(tag))
        problems.push(text + " -> <" + tag + ">");
      for (const attr of el.getAttributeNames()) {
        if (attr.startsWith("on") || attr === "style" || attr === "src" || attr === "action")
          problems.push(text + " -> " + tag + "[" + attr + "]");
      }
      if (tag === "a") {
        if (!/^(https?:|mailto:)/i.test(el.getAttribute("href") || "")) problems.push(text + " -> a href=" + el.getAttribute("href"));
        if (el.getAttribute("target") !== "_blank" || el.getAttribute("rel") !== "noopener noreferrer")
          problems.push(text + " -> a without target=_blank rel=noopener noreferrer");
      }
    }
    box.remove();
  }
  if (window.__pwned) problems.push("a handler ran");  // the element checks above are what matter: no handler survives
  return problems;
}"""


def test_hostile_markdown_renders_inert(console: Console, context: BrowserContext) -> None:
    page = signed_in(context, console)
    problems = page.evaluate(CHECK_MARKDOWN, HOSTILE_MARKDOWN)
    assert problems == [], "\n".join(problems)
    links = page.evaluate("""async () => {
      const { renderMarkdown } = await import("/web/markdown.js");
      const box = document.createElement("div");
      box.append(renderMarkdown("[site](https://example.com/a) <https://example.com/auto> [mail](mailto:a@example.com)"));
      return [...box.querySelectorAll("a")].map((a) => a.getAttribute("href"));
    }""")
    assert links == ["https://example.com/a", "https://example.com/auto", "mailto:a@example.com"]


def test_submission_ids_without_crypto_random_uuid(console: Console, context: BrowserContext) -> None:
    """Over plain http on a LAN address the page is no secure context and has no crypto.randomUUID: its ids are
    still version-4 UUIDs (the server accepts them) and all different."""
    page = signed_in(context, console)
    ids = page.evaluate("""async () => {
      const { newSubmissionId } = await import("/web/pending.js");
      const saved = crypto.randomUUID;
      crypto.randomUUID = undefined;
      try { return Array.from({ length: 200 }, () => newSubmissionId()); } finally { crypto.randomUUID = saved; }
    }""")
    assert len(set(ids)) == 200
    for made in ids:
        assert uuid.UUID(made).version == 4 and str(uuid.UUID(made)) == made, made
