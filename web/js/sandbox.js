// The visitor's own sandbox: an account of this tab's, made by
// POST /demo/sandboxes on first load and kept in sessionStorage (so a
// reload keeps its rows, and another tab or visitor has its own). Every
// request of the lessons and every /demo/* call carries its key; nothing of
// another visitor's is ever shown. A sandbox unused for a while is deleted
// by the server; the next answer is then 401, and the page makes a new one.

const STORAGE_KEY = 'charges.sandbox';
const ROOM_KEY = 'charges.room';

/**
 * The class's room code (docs/deploy.md), from the page's address
 * (`/?room=CODE`) or, after that, from this tab: sent as `Demo-Room` when
 * the page makes its sandbox, so a class behind one address is counted per
 * room, not per address. Null without one.
 */
export function roomCode() {
  const given = new URLSearchParams(location.search).get('room')?.trim();
  try {
    if (given) sessionStorage.setItem(ROOM_KEY, given);
    return given || sessionStorage.getItem(ROOM_KEY) || null;
  } catch {
    return given || null;
  }
}

let current = load();
let making = null;
const listeners = new Set();

function load() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(STORAGE_KEY) ?? 'null');
    return saved && typeof saved.api_key === 'string' ? saved : null;
  } catch {
    return null;
  }
}

function save(sandbox) {
  current = sandbox;
  try {
    if (sandbox) sessionStorage.setItem(STORAGE_KEY, JSON.stringify(sandbox));
    else sessionStorage.removeItem(STORAGE_KEY);
  } catch {
    // Not kept across a reload; still this page's.
  }
  for (const listener of listeners) listener(sandbox);
}

/** Calls `listener(sandbox)` whenever the sandbox changes (made, renewed, its expiry moved). */
export function onSandboxChange(listener) {
  listeners.add(listener);
}

/** The sandbox, or null before one is made. */
export function sandboxOrNull() {
  return current;
}

/** A refusal to make a sandbox: the server's problem+json, with Retry-After. */
export class SandboxRefused extends Error {
  constructor(status, problem, retryAfter) {
    super(problem?.detail || `POST /demo/sandboxes answered ${status}`);
    this.status = status;
    this.problem = problem;
    this.retryAfter = retryAfter;
  }
}

/** This tab's sandbox, made if it has none (concurrent callers share one request). */
export function ensureSandbox() {
  if (current) return Promise.resolve(current);
  making ??= (async () => {
    try {
      const room = roomCode();
      const response = await fetch('/demo/sandboxes', { method: 'POST', cache: 'no-store', headers: room ? { 'Demo-Room': room } : {} });
      const text = await response.text();
      let json = null;
      try {
        json = JSON.parse(text);
      } catch {
        // Not JSON: reported below with the status.
      }
      if (response.status !== 201) throw new SandboxRefused(response.status, json, Number(response.headers.get('Retry-After')) || null);
      save({ api_key: json.api_key, account_id: json.account_id, expires_at: json.expires_at });
      return current;
    } finally {
      making = null;
    }
  })();
  return making;
}

let renewed = false;

/** The server said the key is gone (401): forget it and make a new sandbox. */
export function renewSandbox() {
  renewed = true;
  save(null);
  return ensureSandbox();
}

/** Whether this tab's earlier sandbox was deleted by the server (unused too long) and a new one made. */
export function sandboxWasRenewed() {
  return renewed;
}

/** The expiry the server reported last (each use moves it later). */
export function sawExpiry(expiresAt) {
  if (current && expiresAt !== undefined && current.expires_at !== expiresAt) save({ ...current, expires_at: expiresAt });
}

/** `Authorization` for this tab's sandbox, once it has one. */
export function authHeaders() {
  return current ? [['Authorization', `Bearer ${current.api_key}`]] : [];
}
