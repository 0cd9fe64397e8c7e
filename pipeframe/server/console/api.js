// The JSON API, called with the token the user typed in (kept for this tab only, in sessionStorage).

const TOKEN_KEY = "pipeframe.token";

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

// An error answer of the API: `code` (PF...), `message`, `hint`, and the HTTP status.
export class ApiError extends Error {
  constructor(status, body) {
    super(body.error || `HTTP ${status}`);
    this.status = status;
    this.code = body.code || null;
    this.hint = body.hint || null;
  }
}

// `path`'s JSON answer; an ApiError for any answer that is not 2xx.
export async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const answer = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await answer.text();
  let json = {};
  try {
    json = text ? JSON.parse(text) : {};
  } catch {
    json = { error: text };
  }
  if (!answer.ok) throw new ApiError(answer.status, json);
  return json;
}
