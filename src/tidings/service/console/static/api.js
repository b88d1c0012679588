// The HTTP API, as the console calls it: the same routes as any client, with the token in an
// Authorization header. The token lives in this tab's sessionStorage only: never in a URL,
// never in a cookie.

const TOKEN_KEY = 'tidings.console.token';

// The API's root: the console is served at <root>/console/.
export const ROOT = new URL('..', document.baseURI).href.replace(/\/$/, '');

export const session = {
  token: sessionStorage.getItem(TOKEN_KEY),
  who: null, // GET /v1/session: principal, operator, models, tools, profiles, locked
};

export function remember(token) {
  session.token = token;
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forget() {
  session.token = null;
  session.who = null;
  sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(status, code, detail, title) {
    super(detail || title || code);
    this.status = status;
    this.code = code;
    this.detail = detail || '';
    this.title = title || '';
  }
}

export function headers(extra) {
  return { Authorization: `Bearer ${session.token}`, ...(extra || {}) };
}

export async function problemOf(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  if (body && typeof body === 'object' && typeof body.code === 'string') {
    return new ApiError(response.status, body.code, String(body.detail || ''),
      String(body.title || ''));
  }
  return new ApiError(response.status, 'http_' + response.status, response.statusText);
}

export async function api(method, path, body) {
  const init = { method, headers: headers({ Accept: 'application/json' }), cache: 'no-store' };
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(ROOT + path, init);
  } catch {
    throw new ApiError(0, 'network', 'The server cannot be reached.');
  }
  if (!response.ok) throw await problemOf(response);
  return response.json();
}

export const get = (path) => api('GET', path);
export const post = (path, body) => api('POST', path, body === undefined ? {} : body);

// Each error the API can answer, in plain words. A foreign id reads exactly as an unknown one.
const WORDS = {
  network: 'The server cannot be reached. Is tidings serve running?',
  unauthorized: 'The server did not accept this token. Sign in again.',
  forbidden: 'This token may not do that.',
  not_found: 'Not found.',
  unknown_conversation: 'Not found: there is no such conversation.',
  unknown_run: 'Not found: there is no such run in this conversation.',
  unknown_task: 'Not found: there is no such task in this conversation.',
  unknown_result: 'Not found: there is no such result in this conversation.',
  unknown_approval: 'Not found: there is no such approval in this conversation.',
  unknown_dead_letter: 'Not found: that delivery is not a dead letter.',
  not_dead_letter: 'That delivery is no longer a dead letter: it was retried or discarded.',
  approval_decided: 'That call was already decided; the decision stands.',
  conversation_closed: 'This conversation is archived or deleted: it takes no more input.',
  compaction_refused: 'The history cannot be compacted while a turn is active.',
  backlog_full: 'The conversation holds as many signals as it may; try again later.',
  input_queue_full: 'Too many inputs wait in this conversation; try again in a moment.',
  runtime_locked: 'The server is locked: an operator must unlock it with the master key.',
  master_key_unavailable: 'The server has no master key, so background output is not kept.',
  unknown_profile: 'There is no profile of that name on this server.',
  database_busy: 'The database is busy; try again in a moment.',
  payload_too_large: 'That is too large for the server to accept.',
  origin_not_allowed: 'The server refused the input: only a person\'s input can be posted.',
  unknown_model_or_tool: 'The profile names a model or a tool this server does not have.',
  commit_outcome_unknown: 'The server could not confirm the write: reload before trying again.',
  internal_error: 'The server failed. Nothing about the failure was disclosed.',
  result_corrupt: 'The stored output cannot be opened (it was sealed with another master key, '
    + 'or damaged).',
};

export function words(error) {
  if (!(error instanceof ApiError)) return 'Something went wrong: ' + String(error);
  const said = WORDS[error.code];
  if (error.code === 'invalid_input') return 'The server refused that: ' + error.detail;
  if (error.code === 'unknown_model_or_tool') return said + ' ' + error.detail;
  if (said) return said;
  if (error.status === 503) return 'The server cannot serve this now: ' + error.detail;
  if (error.status === 502) return 'The model failed: ' + error.detail;
  return (error.title || 'The request was refused') + (error.detail ? ': ' + error.detail : '');
}
