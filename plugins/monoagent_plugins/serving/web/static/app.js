// The monoagent web console: sign-in (the `#token=` fragment exchanged, or a token typed), the thread
// list (new, rename, archive and the archived view, delete) and the chat view of the thread in the URL's
// `#thread=<id>`.
import { api, ApiError, setCsrf } from "./api.js";
import { ChatView } from "./chat.js";
import { h, when } from "./dom.js";

const app = document.getElementById("app");
const state = { agent: null, threads: [], archived: false, current: null, chat: null, layout: null };

function fragment() {
  return new URLSearchParams(location.hash.replace(/^#/, ""));
}

function threadInUrl() {
  return fragment().get("thread");
}

function go(threadId) {
  const target = threadId ? "#thread=" + encodeURIComponent(threadId) : "#";
  if (location.hash !== target) history.pushState(null, "", target === "#" ? location.pathname : target);
  route();
}

async function boot() {
  const token = fragment().get("token");
  if (token) {
    // the token leaves the address bar (and the history) before anything else happens
    history.replaceState(null, "", location.pathname + location.search);
    try {
      const session = await api.signIn(token);
      setCsrf(session.csrf);
    } catch (err) {
      return signIn(err.status === 401 ? "That token was refused. Check it and try again." : err.message);
    }
  }
  try {
    const session = await api.session();
    setCsrf(session.csrf);
    state.agent = session.agent || null;
  } catch (err) {
    return signIn(err instanceof ApiError && err.status === 401 ? "" : err.message);
  }
  await main();
}

function signIn(message) {
  closeChat();
  state.layout = null;
  document.title = "Sign in · monoagent";
  const input = h("input", { id: "token", name: "token", type: "password", autocomplete: "off", required: true, spellcheck: "false" });
  const error = h("p", { class: "error", role: "alert", id: "signin-error" }, message || "");
  if (message) input.setAttribute("aria-describedby", "signin-error");
  const button = h("button", { type: "submit", class: "primary" }, "Sign in");
  const form = h("form", { class: "signin-form", onsubmit: async (event) => {
    event.preventDefault();
    button.disabled = true;
    try {
      const session = await api.signIn(input.value.trim());
      setCsrf(session.csrf);
      const full = await api.session();
      state.agent = full.agent || null;
      await main();
    } catch (err) {
      error.textContent = err.status === 401 ? "That token was refused. Check it and try again." : err.message;
      input.setAttribute("aria-describedby", "signin-error");
      button.disabled = false;
      input.focus();
    }
  } },
  h("label", { for: "token" }, "Access token"),
  h("p", { class: "hint", id: "token-hint" }, "The token that monoagent web printed (the link it printed signs you in by itself)."),
  input, button, error);
  input.setAttribute("aria-describedby", message ? "signin-error token-hint" : "token-hint");
  app.replaceChildren(h("main", { class: "signin", "aria-labelledby": "signin-title" },
    h("h1", { id: "signin-title" }, "monoagent"),
    h("p", { class: "lead" }, "Sign in to talk to your agent."),
    form));
  input.focus();
}

async function main() {
  buildLayout();
  await loadThreads();
  route();
}

function buildLayout() {
  const l = {};
  l.toggle = h("button", { type: "button", class: "threads-toggle", "aria-expanded": "false", "aria-controls": "threads",
    onclick: () => setNav(l.toggle.getAttribute("aria-expanded") !== "true") }, "Threads");
  l.title = h("h1", { class: "brand" }, state.agent && state.agent.name ? state.agent.name : "monoagent");
  l.model = h("span", { class: "agent-model" }, state.agent && state.agent.model ? state.agent.model : "");
  l.signOut = h("button", { type: "button", class: "quiet", onclick: async () => {
    try {
      await api.signOut();
    } catch {
      // signed out already, or the server is gone: the sign-in form either way
    }
    signIn("You signed out.");
  } }, "Sign out");
  l.newThread = h("button", { type: "button", class: "primary new-thread", onclick: newThread }, "New thread");
  l.showActive = h("button", { type: "button", "aria-pressed": "true", onclick: () => showArchived(false) }, "Active");
  l.showArchived = h("button", { type: "button", "aria-pressed": "false", onclick: () => showArchived(true) }, "Archived");
  l.list = h("ul", { class: "thread-list", "aria-labelledby": "threads-heading" });
  l.nav = h("nav", { id: "threads", class: "threads", "aria-label": "Threads" },
    h("h2", { id: "threads-heading", class: "visually-hidden" }, "Threads"),
    l.newThread,
    h("div", { class: "segmented", role: "group", "aria-label": "Which threads" }, l.showActive, l.showArchived),
    l.list);
  l.banner = h("div", { class: "banner", role: "alert", hidden: true });
  l.chatTitle = h("h2", { id: "chat-title", class: "chat-title" }, "");
  l.actions = h("div", { class: "chat-actions" });
  l.chatHead = h("div", { class: "chat-head" }, l.chatTitle, l.actions);
  l.chatBody = h("div", { class: "chat-body" });
  l.main = h("main", { id: "chat", class: "chat", "aria-labelledby": "chat-title" }, l.banner, l.chatHead, l.chatBody);
  app.replaceChildren(
    h("header", { class: "top" }, l.toggle, l.title, l.model, h("span", { class: "spacer" }), l.signOut),
    h("div", { class: "layout" }, l.nav, l.main));
  state.layout = l;
}

function setNav(open) {
  const l = state.layout;
  l.toggle.setAttribute("aria-expanded", String(open));
  l.nav.classList.toggle("open", open);
}

export function showError(message) {
  const l = state.layout;
  if (!l) return;
  l.banner.replaceChildren(h("span", {}, message),
    h("button", { type: "button", class: "quiet", "aria-label": "Dismiss the error", onclick: () => { l.banner.hidden = true; } }, "×"));
  l.banner.hidden = false;
}

function unauthorized() {
  signIn("Your session ended. Sign in again.");
}

function handle(err) {
  if (err instanceof ApiError && err.status === 401) return unauthorized();
  showError(err.message || String(err));
}

async function loadThreads() {
  try {
    const data = await api.threads(state.archived);
    state.threads = data.threads || [];
  } catch (err) {
    handle(err);
  }
  paintThreads();
}

function showArchived(archived) {
  state.archived = archived;
  state.layout.showActive.setAttribute("aria-pressed", String(!archived));
  state.layout.showArchived.setAttribute("aria-pressed", String(archived));
  loadThreads();
}

function paintThreads() {
  const l = state.layout;
  if (!l) return;
  const current = threadInUrl();
  const items = state.threads.map((thread) => {
    const link = h("a", { href: "#thread=" + encodeURIComponent(thread.id), class: "thread-link",
      "aria-current": thread.id === current ? "page" : null,
      onclick: (event) => { event.preventDefault(); setNav(false); go(thread.id); } },
    h("span", { class: "thread-title" }, thread.title),
    h("span", { class: "thread-meta" }, thread.state !== "idle" ? h("span", { class: "badge badge-" + thread.state }, thread.state) : null,
      h("time", { datetime: new Date(thread.updated_at * 1000).toISOString() }, when(thread.updated_at))));
    return h("li", { "data-thread-id": thread.id }, link);
  });
  if (!items.length) items.push(h("li", { class: "empty" }, state.archived ? "No archived threads." : "No threads yet."));
  l.list.replaceChildren(...items);
}

async function newThread() {
  try {
    const thread = await api.newThread();
    if (state.archived) showArchived(false);
    state.threads = [thread, ...state.threads.filter((t) => t.id !== thread.id)];
    paintThreads();
    setNav(false);
    go(thread.id);
    document.getElementById("composer-text")?.focus();
  } catch (err) {
    handle(err);
  }
}

function threadChanged(thread) {
  const at = state.threads.findIndex((t) => t.id === thread.id);
  const belongs = thread.archived === state.archived;
  if (at >= 0 && belongs) state.threads[at] = thread;
  else if (at >= 0) state.threads.splice(at, 1);
  else if (belongs) state.threads.unshift(thread);
  state.threads.sort((a, b) => b.updated_at - a.updated_at); // newest first, as the server lists them
  paintThreads();
  if (state.current === thread.id) paintHead(thread);
}

function paintHead(thread) {
  const l = state.layout;
  l.chatTitle.textContent = thread.title;
  document.title = thread.title + " · monoagent";
  const rename = h("button", { type: "button", class: "quiet", onclick: () => renameForm(thread) }, "Rename");
  const archive = h("button", { type: "button", class: "quiet", onclick: () => patch(thread.id, { archived: !thread.archived }) },
    thread.archived ? "Unarchive" : "Archive");
  const remove = h("button", { type: "button", class: "quiet danger-text", onclick: () => removeThread(thread) }, "Delete");
  l.actions.replaceChildren(...(thread.archived ? [h("span", { class: "badge badge-archived" }, "archived")] : []), rename, archive, remove);
}

function renameForm(thread) {
  const l = state.layout;
  const input = h("input", { id: "rename", name: "title", value: thread.title, maxlength: "200", required: true });
  const form = h("form", { class: "rename", onsubmit: async (event) => {
    event.preventDefault();
    await patch(thread.id, { title: input.value.trim() });
    l.chatHead.replaceChildren(l.chatTitle, l.actions);
  } },
  h("label", { for: "rename", class: "visually-hidden" }, "Thread title"), input,
  h("button", { type: "submit", class: "primary" }, "Save"),
  h("button", { type: "button", class: "quiet", onclick: () => l.chatHead.replaceChildren(l.chatTitle, l.actions) }, "Cancel"));
  l.chatHead.replaceChildren(form);
  input.focus();
  input.select();
}

async function patch(id, changes) {
  try {
    const thread = await api.patchThread(id, changes);
    threadChanged(thread);
    if (state.chat && state.chat.id === id) state.chat.thread = thread;
  } catch (err) {
    handle(err);
  }
}

async function removeThread(thread) {
  if (!window.confirm("Delete the thread “" + thread.title + "” and all its messages? This cannot be undone.")) return;
  try {
    await api.deleteThread(thread.id);
    state.threads = state.threads.filter((t) => t.id !== thread.id);
    paintThreads();
    go(state.threads.length ? state.threads[0].id : null);
  } catch (err) {
    handle(err);
  }
}

function closeChat() {
  if (state.chat) state.chat.close();
  state.chat = null;
  state.current = null;
}

async function route() {
  const l = state.layout;
  if (!l) return;
  const id = threadInUrl();
  if (id === state.current && state.chat) return;
  closeChat();
  l.banner.hidden = true;
  paintThreads();
  if (!id) {
    l.chatTitle.textContent = "No thread open";
    l.actions.replaceChildren();
    document.title = "monoagent";
    l.chatBody.replaceChildren(h("div", { class: "welcome" },
      h("p", {}, state.threads.length ? "Pick a thread, or start a new one." : "Start a thread to talk to your agent."),
      h("button", { type: "button", class: "primary", onclick: newThread }, "New thread")));
    return;
  }
  state.current = id;
  l.chatTitle.textContent = "…";
  l.actions.replaceChildren();
  const chat = new ChatView(l.chatBody, id, {
    onThread: (thread) => threadChanged(thread),
    onUnauthorized: unauthorized,
    onError: showError,
  });
  state.chat = chat;
  await chat.load();
}

window.addEventListener("popstate", () => route());
window.addEventListener("hashchange", () => route());
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible" && state.layout) loadThreads();
});

boot();
