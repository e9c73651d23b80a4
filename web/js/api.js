// Talking to the API, and keeping a faithful record of each exchange.
//
// Every request a lesson sends goes through startRequest(), which returns a
// record of exactly what was sent (method, path, the headers this page set,
// body), what came back (status, every readable response header, body) and
// how long it took, measured in the page from just before fetch() until the
// whole body had arrived.

export const REQUEST_TIMEOUT_MS = 30_000;

import { authHeaders, ensureSandbox, renewSandbox, sawExpiry } from './sandbox.js';

let nextId = 1;

/** A fresh Idempotency-Key: a random UUID, as the draft recommends. */
export function newKey() {
  if (globalThis.crypto?.randomUUID) return crypto.randomUUID();
  // randomUUID needs a secure context; getRandomValues does not (e.g. a phone
  // on the LAN opening http://192.168.x.y:8080/).
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/**
 * The request for `POST /charges`.
 *  - apiKey: the account's key, sent as a Bearer token.
 *  - key: the Idempotency-Key, sent as a Structured Field string ("…").
 *  - faults: Demo-Fault items, e.g. ['lose-response'] or ['delay-commit=5000'].
 *  - mode: Demo-Mode, e.g. 'check-then-insert', 'atomic' or 'key-first'.
 *  - network: true to ask for the card network (Demo-Network: on). Without
 *    it a demo charge is the one transaction (key, charge, stored response)
 *    and its authorization_id is null.
 */
export function chargeRequest({ apiKey, amount, currency = 'jpy', description, paymentMethod, key, faults = [], mode, network = false, session } = {}) {
  const headers = apiHeaders(apiKey, { key, faults, mode, network });
  // Demo-Session: the request's database sessions are named for it (psql's pg_stat_activity then tells A from B).
  if (session) headers.push(['Demo-Session', session]);
  const body = { amount, currency };
  if (description !== undefined) body.description = description;
  if (paymentMethod !== undefined) body.payment_method = paymentMethod;
  return {
    kind: 'charge',
    method: 'POST',
    path: '/charges',
    headers,
    body: JSON.stringify(body, null, 2),
    // What the lesson meant, kept for the diagram's narration.
    intent: { amount, currency, description, paymentMethod: paymentMethod ?? null, key: key ?? null, faults, mode: mode ?? null, network },
  };
}

/**
 * Whether a charge's test payment method declines (its intent's
 * paymentMethod): Stripe's declining test ids all start so
 * (pm_card_chargeDeclined, …InsufficientFunds, …). A lost answer tells
 * nothing, so what was thrown away (a 402 or a 201) is known from this.
 */
export function declines(intent) {
  return Boolean(intent?.paymentMethod?.startsWith('pm_card_chargeDeclined'));
}

/** Headers every request of the sandbox's API carries, plus the optional ones. */
function apiHeaders(apiKey, { key, faults = [], mode, network = false, json = true } = {}) {
  const headers = [['Authorization', `Bearer ${apiKey}`]];
  if (json) headers.push(['Content-Type', 'application/json']);
  if (key) headers.push(['Idempotency-Key', `"${key}"`]);
  if (faults.length) headers.push(['Demo-Fault', faults.join(', ')]);
  if (mode) headers.push(['Demo-Mode', mode]);
  if (network) headers.push(['Demo-Network', 'on']);
  return headers;
}

/**
 * The request for `POST /charges/{id}/refunds`: refund `amount` (minor
 * units) of the charge. A refund is a change ("refund 100"), so only a key
 * makes its retry safe.
 */
export function refundRequest({ apiKey, chargeId, amount, currency = 'jpy', key, faults = [], mode } = {}) {
  return {
    kind: 'refund',
    method: 'POST',
    path: `/charges/${encodeURIComponent(chargeId)}/refunds`,
    headers: apiHeaders(apiKey, { key, faults, mode }),
    body: JSON.stringify({ amount }, null, 2),
    intent: { amount, currency, chargeId, key: key ?? null, faults, mode: mode ?? null },
  };
}

/**
 * The request for `PUT /charges/{id}/description`: the whole new value, so
 * sending it again changes nothing more. It needs no key.
 */
export function describeRequest({ apiKey, chargeId, description, faults = [] } = {}) {
  return {
    kind: 'describe',
    method: 'PUT',
    path: `/charges/${encodeURIComponent(chargeId)}/description`,
    headers: apiHeaders(apiKey, { faults }),
    body: JSON.stringify({ description }, null, 2),
    intent: { chargeId, description, key: null, faults, mode: null },
  };
}

/** The request for `GET /charges/{id}`: does the database know this charge? */
export function lookupRequest({ apiKey, chargeId } = {}) {
  return {
    kind: 'lookup',
    method: 'GET',
    path: `/charges/${encodeURIComponent(chargeId)}`,
    headers: apiHeaders(apiKey, { json: false }),
    body: null,
    intent: { chargeId, key: null, faults: [], mode: null },
  };
}

/** The demo-only shortcut that makes a stored key expire now. */
export function expireRequest(key) {
  return {
    kind: 'expire',
    method: 'POST',
    path: `/demo/keys/${encodeURIComponent(key)}/expire`,
    headers: authHeaders(),
    body: null,
    intent: { key },
  };
}

/** The demo-only shortcut that runs one pass of the purge of expired keys. */
export function purgeRequest() {
  return {
    kind: 'purge',
    method: 'POST',
    path: '/demo/purge',
    headers: authHeaders(),
    body: null,
    intent: {},
  };
}

/**
 * Sends `spec` and returns `{ record, done }` at once: `record` fills in as
 * the exchange happens (so a timer can show it live), `done` resolves with
 * the same record when the answer is complete or the request failed. It
 * never rejects; a failure is recorded in `record.error`.
 */
export function startRequest(spec, { timeoutMs = REQUEST_TIMEOUT_MS } = {}) {
  const record = {
    id: nextId++,
    spec,
    startedAt: performance.now(),
    sentAtWall: new Date(),
    endedAt: null,
    elapsedMs: null,
    status: null,
    statusText: '',
    headers: [],
    bodyText: '',
    json: null,
    error: null,
    /** Milliseconds so far, while pending; the final figure once done. */
    elapsedNow() {
      return this.elapsedMs ?? performance.now() - this.startedAt;
    },
    header(name) {
      const found = this.headers.find(([n]) => n.toLowerCase() === name.toLowerCase());
      return found ? found[1] : null;
    },
    get replayed() {
      return this.header('Idempotent-Replayed') === 'true';
    },
    get problemType() {
      return this.json && typeof this.json === 'object' ? this.json.type ?? null : null;
    },
  };
  const done = (async () => {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), timeoutMs);
    try {
      const response = await fetch(spec.path, {
        method: spec.method,
        headers: spec.headers,
        body: spec.body ?? undefined,
        cache: 'no-store',
        signal: controller.signal,
      });
      const text = await response.text();
      record.endedAt = performance.now();
      record.status = response.status;
      record.statusText = response.statusText || REASONS[response.status] || '';
      record.headers = [...response.headers.entries()].map(([n, v]) => [titleCase(n), v]);
      record.bodyText = text;
      try {
        record.json = text ? JSON.parse(text) : null;
      } catch {
        record.json = null;
      }
    } catch (error) {
      record.endedAt = performance.now();
      record.error = error.name === 'AbortError' ? `no answer within ${timeoutMs / 1000} s` : String(error.message || error);
    } finally {
      clearTimeout(timer);
      record.elapsedMs = Math.round(record.endedAt - record.startedAt);
    }
    return record;
  })();
  return { record, done };
}

/** GET /demo/config: the server's settings, as the page uses them (see server.js). */
export async function getConfig() {
  return jsonCall('GET', '/demo/config');
}

/** GET /demo/state: this tab's sandbox's tables as they are now. */
export async function getState() {
  return sandboxCall('GET', '/demo/state');
}

/** GET /demo/slot: whether this tab's sandbox holds a transaction open now, and for how long (from memory: no tables read). */
export async function getSlot() {
  return sandboxCall('GET', '/demo/slot');
}

/** POST /demo/reset: empties this tab's sandbox's tables; answers the (empty) state. */
export async function resetDemo() {
  return sandboxCall('POST', '/demo/reset');
}

/**
 * A /demo/* call on this tab's sandbox (made first if need be). A 401 means
 * the server deleted it (unused too long): a new one is made and the call
 * sent once more.
 */
async function sandboxCall(method, path) {
  await ensureSandbox();
  let state;
  try {
    state = await jsonCall(method, path, authHeaders());
  } catch (error) {
    if (error.status !== 401) throw error;
    await renewSandbox();
    state = await jsonCall(method, path, authHeaders());
  }
  sawExpiry(state?.sandbox?.expires_at ?? null);
  return state;
}

async function jsonCall(method, path, headers = []) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
  try {
    const response = await fetch(path, { method, headers, cache: 'no-store', signal: controller.signal });
    const text = await response.text();
    if (!response.ok) {
      const error = new Error(`${method} ${path} answered ${response.status}: ${text.slice(0, 200)}`);
      error.status = response.status;
      throw error;
    }
    return JSON.parse(text);
  } finally {
    clearTimeout(timer);
  }
}

/** fetch() lowercases header names; show them as they are usually written. */
function titleCase(name) {
  return name
    .split('-')
    .map((part) => part.charAt(0).toUpperCase() + part.slice(1))
    .join('-');
}

export const REASONS = {
  200: 'OK',
  201: 'Created',
  204: 'No Content',
  400: 'Bad Request',
  401: 'Unauthorized',
  404: 'Not Found',
  405: 'Method Not Allowed',
  409: 'Conflict',
  413: 'Content Too Large',
  415: 'Unsupported Media Type',
  422: 'Unprocessable Content',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
  504: 'Gateway Timeout',
};
