// What the page knows of the server it talks to, read once at start-up from
// GET /demo/config (demo mode only): the backend's name, the key's lifetime
// and lease with their defaults, the Retry-After of a 409, the purge's batch,
// the demo's limits and account, and every problem type. The page repeats
// none of these; it asks here.

import { getConfig } from './api.js';
import { ensureSandbox, onSandboxChange, sandboxOrNull } from './sandbox.js';

let config = null;
let loading = null;

/**
 * Reads GET /demo/config; later calls share that one answer. A failed read
 * is forgotten, so the next call tries again.
 */
export function loadServer() {
  loading ??= Promise.all([getConfig(), ensureSandbox()]).then(
    ([answer]) => {
      config = answer;
      useSandbox(sandboxOrNull());
      return config;
    },
    (error) => {
      loading = null;
      throw error;
    },
  );
  return loading;
}

/** The server's settings, or null before they have been read. */
export function serverOrNull() {
  return config;
}

/** The server's settings; only once loadServer() has resolved. */
export function server() {
  if (!config) throw new Error('the server’s settings (GET /demo/config) have not been read yet');
  return config;
}

/**
 * A problem type the server lists, by the last segment of its URI:
 * problem('idempotency-key-reused') → { type: '/problems/idempotency-key-reused', status: 422, title }.
 */
export function problem(slug) {
  const found = server().problem_types.find((p) => p.type.split('/').pop() === slug);
  if (!found) throw new Error(`the server lists no problem type “${slug}”`);
  return found;
}

/**
 * The account every lesson's request is made as: this tab's sandbox (the
 * lessons read server().account.api_key), renewed with it.
 */
function useSandbox(sandbox) {
  if (config && sandbox) config.account = { name: 'your sandbox', api_key: sandbox.api_key, expires_at: sandbox.expires_at };
}

onSandboxChange(useSandbox);
