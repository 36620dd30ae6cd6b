// The page's own submissions not yet final, in sessionStorage (this tab, this browser session): the
// submission id made at Send, the thread and the text. A reload looks each one up by GET, never posts it
// again; one is forgotten once its receipt is final (completed, failed, cancelled, interrupted).
const KEY = "monoagent.web.pending";
export const FINAL = new Set(["completed", "failed", "cancelled", "interrupted"]);

function load() {
  try {
    const value = JSON.parse(sessionStorage.getItem(KEY) || "{}");
    return value && typeof value === "object" ? value : {};
  } catch {
    return {};
  }
}

function save(all) {
  sessionStorage.setItem(KEY, JSON.stringify(all));
}

export function newSubmissionId() {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  // crypto.randomUUID exists only in a secure context (https, or loopback): a console served over plain
  // http on another address makes the same version-4 UUID from crypto.getRandomValues
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  return hex.slice(0, 8) + "-" + hex.slice(8, 12) + "-" + hex.slice(12, 16) + "-" + hex.slice(16, 20) + "-" + hex.slice(20);
}

export function remember(submissionId, threadId, text) {
  const all = load();
  all[submissionId] = { thread_id: threadId, text, created_at: Date.now() / 1000, state: "sending" };
  save(all);
}

export function update(submissionId, state) {
  const all = load();
  if (!all[submissionId]) return;
  if (FINAL.has(state)) delete all[submissionId];
  else all[submissionId].state = state;
  save(all);
}

export function forget(submissionId) {
  const all = load();
  delete all[submissionId];
  save(all);
}

export function forThread(threadId) {
  return Object.entries(load())
    .filter(([, entry]) => entry.thread_id === threadId)
    .map(([submission_id, entry]) => ({ submission_id, ...entry }))
    .sort((a, b) => a.created_at - b.created_at);
}

export function get(submissionId) {
  return load()[submissionId] || null;
}
