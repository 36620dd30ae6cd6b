// The console's HTTP API (WEB_CONTRACT.md): JSON in and out, the session cookie, the CSRF header on
// every change. An error answer becomes an ApiError carrying the server's message and code.

const BASE = "/web/api";
let csrf = null;

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function setCsrf(token) {
  csrf = token;
}

export async function call(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && csrf) headers["X-CSRF-Token"] = csrf;
  let response;
  try {
    response = await fetch(BASE + path, {
      method,
      headers,
      credentials: "same-origin",
      cache: "no-store",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, "network", "The server could not be reached (" + err.message + ").");
  }
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    throw new ApiError(response.status, error.code || "http_" + response.status,
      error.message || "The server answered " + response.status + ".");
  }
  return data;
}

export const api = {
  signIn: (token) => call("POST", "/session", { token }),
  session: () => call("GET", "/session"),
  signOut: () => call("DELETE", "/session"),
  threads: (archived) => call("GET", "/threads?archived=" + (archived ? "true" : "false")),
  newThread: (title) => call("POST", "/threads", title ? { title } : {}),
  patchThread: (id, changes) => call("PATCH", "/threads/" + encodeURIComponent(id), changes),
  deleteThread: (id) => call("DELETE", "/threads/" + encodeURIComponent(id)),
  thread: (id) => call("GET", "/threads/" + encodeURIComponent(id)),
  submit: (id, submissionId, text) =>
    call("POST", "/threads/" + encodeURIComponent(id) + "/submissions", { submission_id: submissionId, text }),
  submission: (submissionId) => call("GET", "/submissions/" + encodeURIComponent(submissionId)),
  cancel: (id) => call("POST", "/threads/" + encodeURIComponent(id) + "/cancel", {}),
  eventsUrl: (id) => BASE + "/threads/" + encodeURIComponent(id) + "/events",
};
