// The chat view of one thread: its messages, the answer streamed as SSE `text` events arrive, tool
// lines, queued follow-ups, Send (a submission id kept in sessionStorage until its receipt is final)
// and Cancel. The state after a reload comes from GET and the event stream's snapshot, never from
// posting again.
import { api, ApiError } from "./api.js";
import { h, when } from "./dom.js";
import { renderMarkdown } from "./markdown.js";
import * as pending from "./pending.js";

const EVENT_TYPES = ["snapshot", "turn_started", "text", "tool", "turn_finished", "queued", "thread"];

export class ChatView {
  // hooks: {onThread(thread), onUnauthorized(), onError(message)}
  constructor(root, threadId, hooks) {
    this.root = root;
    this.id = threadId;
    this.hooks = hooks;
    this.thread = null;
    this.messages = [];
    this.fromEvents = new Map(); // message id -> message, finished turns seen on the stream
    this.active = null; // {submission_id, run_id, text, tools: [tool line]}
    this.queued = [];
    this.texts = new Map(); // submission id -> text, to show a queued or running submission's words
    this.lost = new Set(); // submission ids this tab sent that the server does not know
    this.lastEventId = 0;
    this.source = null;
    this.closed = false;
    this.refreshTimer = null;
    this.paintQueued = false;
    this.cancelling = false;
    this.build();
  }

  build() {
    // not a live region: the view is redrawn as the answer streams; the status line below announces the end
    this.log = h("section", { class: "messages", "aria-label": "Messages", tabindex: "0" });
    this.status = h("p", { class: "status", role: "status", "aria-live": "polite" });
    this.text = h("textarea", { id: "composer-text", name: "text", rows: "3", required: true,
      placeholder: "Write a message (Enter sends, Shift+Enter for a new line)" });
    this.sendButton = h("button", { type: "submit", class: "primary" }, "Send");
    this.cancelButton = h("button", { type: "button", class: "danger cancel", hidden: true,
      onclick: () => this.cancel() }, "Cancel");
    this.text.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.form.requestSubmit();
      }
    });
    this.form = h("form", { class: "composer", onsubmit: (event) => { event.preventDefault(); this.send(); } },
      h("label", { for: "composer-text", class: "visually-hidden" }, "Message"),
      this.text,
      h("div", { class: "composer-buttons" }, this.cancelButton, this.sendButton));
    this.root.replaceChildren(this.log, this.status, this.form);
  }

  async load() {
    let data;
    try {
      data = await api.thread(this.id);
    } catch (err) {
      this.fail(err);
      return false;
    }
    if (this.closed) return false;
    this.apply(data, true);
    for (const entry of pending.forThread(this.id)) this.texts.set(entry.submission_id, entry.text);
    this.paint();
    this.open();
    this.recoverPending();
    return true;
  }

  // GET /web/api/threads/{id}: the messages, and on first load the active turn and the queue too
  apply(data, first) {
    this.thread = data.thread;
    this.hooks.onThread(data.thread);
    this.messages = data.messages || [];
    for (const [id, message] of this.fromEvents) {
      if (this.messages.some((m) => m.id === id)) this.fromEvents.delete(id);
    }
    if (first) {
      this.active = normaliseActive(data.active);
      this.setQueued(data.queued || []);
    }
  }

  setQueued(list) {
    this.queued = list;
    for (const submission of list) if (submission.text) this.texts.set(submission.submission_id, submission.text);
  }

  // every submission this tab sent that is not final yet is looked up by GET (a reload, a reconnect)
  async recoverPending() {
    for (const entry of pending.forThread(this.id)) {
      try {
        const submission = await api.submission(entry.submission_id);
        pending.update(entry.submission_id, submission.state);
        this.lost.delete(entry.submission_id);
      } catch (err) {
        if (err instanceof ApiError && err.status === 404) this.lost.add(entry.submission_id);
        else if (err instanceof ApiError && err.status === 401) return this.hooks.onUnauthorized();
      }
    }
    this.paint();
  }

  open() {
    if (this.closed) return;
    const source = new EventSource(api.eventsUrl(this.id));
    this.source = source;
    for (const type of EVENT_TYPES) {
      source.addEventListener(type, (event) => {
        if (this.source === source) this.onEvent(type, event);
      });
    }
    source.addEventListener("open", () => {
      if (this.source === source) this.setStatus("");
    });
    source.addEventListener("error", () => {
      if (this.source !== source || this.closed) return;
      if (source.readyState === EventSource.CLOSED) {
        // the server refused the stream (signed out, the thread gone, restarting): ask why, then try again
        this.setStatus("Connection lost; reconnecting…");
        source.close();
        this.source = null;
        setTimeout(() => this.reopen(), 1500);
      } else {
        this.setStatus("Connection lost; reconnecting…");
      }
    });
  }

  async reopen() {
    if (this.closed || this.source) return;
    let data;
    try {
      data = await api.thread(this.id);
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) return this.hooks.onUnauthorized();
      if (err instanceof ApiError && err.status === 404) {
        this.setStatus("");
        return this.hooks.onError("This thread no longer exists (deleted elsewhere).");
      }
      setTimeout(() => this.reopen(), 3000);
      return;
    }
    if (this.closed) return;
    this.apply(data, false);
    this.open();
  }

  close() {
    this.closed = true;
    if (this.source) this.source.close();
    this.source = null;
    clearTimeout(this.refreshTimer);
  }

  onEvent(type, event) {
    const id = Number(event.lastEventId) || 0;
    let data;
    try {
      data = JSON.parse(event.data);
    } catch {
      return;
    }
    if (type === "snapshot") {
      if (id) this.lastEventId = id;
      if (data.thread) {
        this.thread = data.thread;
        this.hooks.onThread(data.thread);
      }
      this.active = normaliseActive(data.active);
      this.setQueued(data.queued || []);
      this.refreshSoon();
      this.recoverPending();
      this.paint();
      return;
    }
    if (id && id <= this.lastEventId) return; // seen already (a reconnect that replays)
    if (id) this.lastEventId = id;
    if (type === "turn_started") {
      this.active = { submission_id: data.submission_id, run_id: data.run_id, text: "", tools: [] };
      this.queued = this.queued.filter((s) => s.submission_id !== data.submission_id);
      this.cancelling = false;
      this.refreshSoon();
    } else if (type === "text") {
      if (!this.active || (data.run_id && this.active.run_id && data.run_id !== this.active.run_id)) {
        this.active = { submission_id: null, run_id: data.run_id, text: "", tools: [] };
      }
      this.active.text += data.text || "";
    } else if (type === "tool") {
      if (!this.active) this.active = { submission_id: null, run_id: data.run_id, text: "", tools: [] };
      upsertTool(this.active.tools, data.tool);
    } else if (type === "turn_finished") {
      const message = data.message;
      if (message && message.id) this.fromEvents.set(message.id, message);
      if (data.submission_id) {
        pending.update(data.submission_id, (message && message.status) || "completed");
        this.lost.delete(data.submission_id);
      }
      if (!this.active || !data.run_id || this.active.run_id === data.run_id || this.active.run_id === null) this.active = null;
      this.cancelling = false;
      this.setStatus(message && message.status !== "completed" ? "The answer " + message.status + "." : "Answer complete.");
      this.refreshSoon();
    } else if (type === "queued") {
      const submission = data.submission;
      if (submission && !this.queued.some((s) => s.submission_id === submission.submission_id)
          && !(this.active && this.active.submission_id === submission.submission_id)) {
        this.setQueued([...this.queued, submission]);
      }
    } else if (type === "thread") {
      if (data.thread) {
        this.thread = data.thread;
        this.hooks.onThread(data.thread);
      }
    }
    this.paintSoon();
  }

  refreshSoon() {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(async () => {
      try {
        const data = await api.thread(this.id);
        if (!this.closed) {
          this.apply(data, false);
          this.paint();
        }
      } catch (err) {
        this.fail(err);
      }
    }, 50);
  }

  async send(again) {
    const text = again ? again.text : this.text.value;
    if (!text.trim()) return;
    const submissionId = again ? again.submission_id : pending.newSubmissionId();
    if (!again) {
      pending.remember(submissionId, this.id, text);
      this.texts.set(submissionId, text);
      this.text.value = "";
    }
    this.lost.delete(submissionId);
    this.paint();
    try {
      const submission = await api.submit(this.id, submissionId, text);
      pending.update(submissionId, submission.state);
      if (submission.state === "queued" && !this.queued.some((s) => s.submission_id === submissionId)
          && !(this.active && this.active.submission_id === submissionId)) {
        this.setQueued([...this.queued, submission]);
      }
      if (this.active && this.active.submission_id !== submissionId && submission.state === "queued") {
        this.setStatus("Queued: it runs after the current answer.");
      }
    } catch (err) {
      if (err instanceof ApiError && err.status !== 0 && err.status !== 503 && err.status !== 429) {
        pending.forget(submissionId); // refused: nothing was stored
        this.texts.delete(submissionId);
        if (!again) this.text.value = text;
      } else {
        this.lost.add(submissionId); // unknown: offered again under the same id
      }
      this.fail(err);
    }
    this.paint();
  }

  async cancel() {
    this.cancelling = true;
    this.paint();
    try {
      await api.cancel(this.id);
      this.setStatus("Cancelling…");
    } catch (err) {
      this.cancelling = false;
      this.fail(err);
      this.paint();
    }
  }

  fail(err) {
    if (err instanceof ApiError && err.status === 401) {
      this.hooks.onUnauthorized();
      return;
    }
    this.hooks.onError(err.message || String(err));
  }

  setStatus(text) {
    if (this.status.textContent !== text) this.status.textContent = text;
  }

  running() {
    return Boolean(this.active) || (this.thread && this.thread.state === "running");
  }

  paintSoon() {
    if (this.paintQueued) return;
    this.paintQueued = true;
    requestAnimationFrame(() => {
      this.paintQueued = false;
      this.paint();
    });
  }

  paint() {
    if (this.closed) return;
    const atBottom = this.log.scrollHeight - this.log.scrollTop - this.log.clientHeight < 60;
    const messages = [...this.messages];
    for (const message of this.fromEvents.values()) {
      if (messages.some((m) => m.id === message.id)) continue;
      const sid = message.submission_id;
      if (sid && this.texts.has(sid) && !messages.some((m) => m.role === "user" && m.submission_id === sid)) {
        // the question of an answer that just finished, until GET brings the stored one
        messages.push({ id: "pending-" + sid, role: "user", text: this.texts.get(sid), submission_id: sid });
      }
      messages.push(message);
    }
    const known = new Set(messages.map((m) => m.submission_id).filter(Boolean));
    const nodes = messages.map((message) => messageNode(message));
    if (this.active) {
      const sid = this.active.submission_id;
      if (sid && !messages.some((m) => m.role === "user" && m.submission_id === sid) && this.texts.has(sid)) {
        nodes.push(userNode(this.texts.get(sid), "running"));
      }
      nodes.push(activeNode(this.active, this.cancelling));
      if (sid) known.add(sid);
    }
    for (const submission of this.queued) {
      if (known.has(submission.submission_id)) continue;
      known.add(submission.submission_id);
      nodes.push(userNode(this.texts.get(submission.submission_id) || submission.text || "(a follow-up sent elsewhere)", "queued"));
    }
    for (const entry of pending.forThread(this.id)) {
      if (known.has(entry.submission_id)) continue;
      if (this.lost.has(entry.submission_id)) nodes.push(lostNode(entry, () => this.send(entry)));
      else if (entry.state === "sending" || entry.state === "queued") nodes.push(userNode(entry.text, entry.state));
      else if (entry.state === "running") nodes.push(userNode(entry.text, "running")); // its turn_started is on its way
    }
    if (!nodes.length) nodes.push(h("p", { class: "empty" }, "No messages yet. Write the first one below."));
    this.log.replaceChildren(...nodes);
    if (atBottom) this.log.scrollTop = this.log.scrollHeight;
    const running = this.running();
    this.cancelButton.hidden = !running;
    this.cancelButton.disabled = this.cancelling;
    this.cancelButton.textContent = this.cancelling ? "Cancelling…" : "Cancel";
    this.sendButton.textContent = running ? "Queue" : "Send";
    this.form.classList.toggle("is-running", running);
    this.root.dataset.state = running ? "running" : "idle";
  }
}

function normaliseActive(active) {
  if (!active) return null;
  return { submission_id: active.submission_id || null, run_id: active.run_id || null,
    text: typeof active.text === "string" ? active.text : "", tools: Array.isArray(active.tools) ? [...active.tools] : [] };
}

function upsertTool(tools, tool) {
  if (!tool) return;
  const at = tools.findIndex((t) => t.id === tool.id);
  if (at >= 0) tools[at] = tool;
  else tools.push(tool);
}

function toolsNode(tools) {
  if (!tools || !tools.length) return null;
  return h("ul", { class: "tools", "aria-label": "Tool activity" },
    tools.map((tool) => {
      const name = tool.name || "tool";
      const line = tool.line || name + " " + (tool.status || "");
      // the line usually starts with the call ("clock() → ok"): its name in bold, the rest as it is
      const [head, rest] = line.startsWith(name) ? [name, line.slice(name.length)] : [name, " " + line];
      return h("li", { class: "tool tool-" + safeClass(tool.status), "data-status": tool.status || "" },
        h("span", { class: "tool-name" }, head), h("span", { class: "tool-line" }, rest));
    }));
}

function safeClass(value) {
  return String(value || "unknown").replace(/[^a-z0-9_-]/gi, "");
}

function userNode(text, state) {
  const label = { queued: "Queued", sending: "Sending…", running: "" }[state] || "";
  return h("article", { class: "msg msg-user" + (state ? " msg-" + state : ""), "aria-label": label ? "You (" + label.toLowerCase() + ")" : "You" },
    h("div", { class: "who" }, "You", label ? h("span", { class: "badge badge-" + state }, label) : null),
    h("div", { class: "body plain" }, text));
}

function lostNode(entry, again) {
  return h("article", { class: "msg msg-user msg-lost", "aria-label": "You (not received)" },
    h("div", { class: "who" }, "You", h("span", { class: "badge badge-lost" }, "Not received")),
    h("div", { class: "body plain" }, entry.text),
    h("p", { class: "error" }, "The server has no record of this message. ",
      h("button", { type: "button", class: "link", onclick: again }, "Send again")));
}

function messageNode(message) {
  if (message.role === "user") {
    const node = userNode(message.text, "");
    node.dataset.messageId = message.id;
    return node;
  }
  const status = message.status || "completed";
  const body = h("div", { class: "body markdown" });
  body.append(renderMarkdown(message.text));
  const meta = [];
  if (message.model) meta.push(h("span", { class: "model" }, message.model));
  if (message.usage) meta.push(h("span", { class: "usage" }, message.usage.input_tokens + " in · " + message.usage.output_tokens + " out tokens"));
  if (message.created_at) meta.push(h("time", { datetime: new Date(message.created_at * 1000).toISOString() }, when(message.created_at)));
  return h("article", { class: "msg msg-assistant status-" + safeClass(status), "data-message-id": message.id, "data-status": status, "aria-label": "Agent" },
    h("div", { class: "who" }, "Agent", status !== "completed" ? h("span", { class: "badge badge-" + safeClass(status) }, status) : null),
    toolsNode(message.tools),
    message.text ? body : null,
    status !== "completed" || message.error
      ? h("p", { class: "error" }, errorText(status, message.error))
      : null,
    meta.length ? h("p", { class: "meta" }, meta.flatMap((item, i) => (i ? [" · ", item] : [item]))) : null);
}

function errorText(status, error) {
  const what = { failed: "Failed", cancelled: "Cancelled", interrupted: "Interrupted (the server stopped during this answer)" }[status] || status;
  return error ? what + ": " + error : what + ".";
}

function activeNode(active, cancelling) {
  const body = h("div", { class: "body markdown" });
  body.append(renderMarkdown(active.text));
  return h("article", { class: "msg msg-assistant msg-active", "data-run-id": active.run_id || "", "aria-label": "Agent (answering)", "aria-busy": "true" },
    h("div", { class: "who" }, "Agent", h("span", { class: "badge badge-running" }, cancelling ? "Cancelling…" : "Answering…")),
    toolsNode(active.tools),
    active.text ? body : h("div", { class: "body typing", "aria-hidden": "true" }, h("span"), h("span"), h("span")));
}
