// Wires the page: language toggle, reset button, the header's live summary
// of the database, and the lessons. At start-up it reads the server's
// settings (GET /demo/config) once, and the tables (GET /demo/state).

import { t, lang, setLang, applyStatic, onLangChange, fmtCountdown, fmtDuration } from './i18n.js';
import { getState, resetDemo } from './api.js';
import { loadServer, server, serverOrNull } from './server.js';
import { mountExperiments, renderServerFacts } from './lessons/index.js';
import { mountSelfCheck } from './selfcheck.js';
import { mountModelSection } from './lessons/model.js';
import { rerenderAll, onBusyChange, onState, isBusy, afterReset } from './experiment.js';
import { updateScrollHints } from './tables.js';
import { sandboxOrNull, SandboxRefused, sandboxWasRenewed } from './sandbox.js';

const $ = (selector) => document.querySelector(selector);

let lastState = null;
/**
 * Why the page cannot work now, with a live countdown to its next try:
 * { kind: 'roomFull' | 'tooMany' | 'down', until } (performance.now() ms), or
 * null. The sentence is in the header's live line (said once), the
 * countdown on the line below it (not live: it changes every second).
 */
let trouble = null;
/** A server that does not answer is asked again this often. */
const DOWN_RETRY_MS = 5000;

/** How often the header re-reads the tables while no experiment is running… */
const HEADER_REFRESH_MS = 5000;
/** …and while one is: its count follows the run (a held transaction commits in the middle of a step). */
const HEADER_REFRESH_BUSY_MS = 1000;

/** "Your sandbox", and when the server deletes it unless it is used again, in local time. */
function renderSandbox() {
  const line = $('[data-testid="sandbox-status"]');
  if (trouble) {
    const left = fmtCountdown(trouble.until - performance.now());
    line.textContent = trouble.until <= performance.now() ? t('status.trying') : t(`status.${trouble.kind === 'answered' ? 'down' : trouble.kind}.wait`, { left });
    line.dataset.trouble = trouble.kind;
    line.classList.add('offline');
    return;
  }
  delete line.dataset.trouble;
  line.classList.remove('offline');
  const sandbox = sandboxOrNull();
  if (!sandbox) {
    line.textContent = '';
    return;
  }
  const expires = lastState && lastState !== 'offline' ? lastState.sandbox?.expires_at : sandbox.expires_at;
  if (!expires) {
    line.textContent = t('status.sandboxShared');
    return;
  }
  const time = new Date(expires).toLocaleTimeString(lang() === 'ja' ? 'ja-JP' : 'en-GB', { hour: '2-digit', minute: '2-digit' });
  const idle = serverOrNull()?.sandboxes?.idle_expiry_seconds;
  line.textContent = sandboxWasRenewed() && idle ? t('status.expired', { time, idle: fmtDuration(idle) }) : t('status.sandbox', { time });
  line.dataset.expiresAt = expires;
}

function renderHeader() {
  renderSandbox();
  const backend = $('[data-testid="server-status"]');
  const db = $('[data-testid="db-status"]');
  if (trouble || lastState === 'offline') {
    // What the server said (or that it said nothing), not a guess that it is down.
    backend.textContent = t(`status.${trouble?.kind ?? 'down'}.head`, { status: trouble?.status ?? '' });
    backend.dataset.trouble = trouble?.kind ?? 'down';
    backend.classList.add('offline');
    db.textContent = '';
    return;
  }
  delete backend.dataset.trouble;
  backend.classList.remove('offline');
  if (!lastState) {
    backend.textContent = t('status.loading');
    db.textContent = '';
    return;
  }
  const { backend_name: name, idempotency_mode: mode } = server();
  backend.textContent = t('status.backend', { backend: name, mode });
  db.textContent = t('status.db', { charges: lastState.charges.length, keys: lastState.idempotency_keys.length });
  // When the database was read for this count, by the server's clock.
  db.dataset.readAt = lastState.now ?? '';
}

/** The page cannot work now: says why, and when it tries again. */
function troubleFrom(error) {
  if (error instanceof SandboxRefused && (error.status === 503 || error.status === 429)) {
    const secs = error.retryAfter ?? 60;
    return { kind: error.status === 503 ? 'roomFull' : 'tooMany', until: performance.now() + secs * 1000 };
  }
  // An answer that is an error (a proxy's 502, a database outage's 503): the server said so.
  if (error?.status) return { kind: 'answered', status: error.status, until: performance.now() + DOWN_RETRY_MS };
  return { kind: 'down', until: performance.now() + DOWN_RETRY_MS };
}

/** When the page last showed a state it read (its own read, or an experiment's). */
let lastShown = 0;

function showState(state) {
  lastState = state;
  lastShown = performance.now();
  renderHeader();
}

function renderLangButton() {
  const button = $('[data-testid="lang-toggle"]');
  // The button's name is the language it switches to, written in that
  // language, as it is shown (so a voice user can say what they see); what it
  // does is its description.
  button.textContent = t('lang.switch');
  button.removeAttribute('aria-label');
  button.title = t('lang.switchLabel');
  button.lang = lang() === 'ja' ? 'en' : 'ja';
}

async function onReset() {
  const button = $('[data-testid="reset"]');
  const note = $('[data-testid="reset-status"]');
  if (isBusy()) return;
  button.disabled = true;
  button.textContent = t('reset.busy');
  note.textContent = ''; // so the same message is announced again
  try {
    showState(await resetDemo());
    afterReset();
    note.textContent = t('reset.done');
  } catch (error) {
    note.textContent = t('reset.failed', { message: error.message || String(error) });
  } finally {
    button.disabled = isBusy();
    button.textContent = t('reset');
  }
}

async function start() {
  applyStatic(document);
  renderLangButton();
  mountExperiments(document);
  mountModelSection(document);
  mountSelfCheck(document);
  onState(showState);
  onBusyChange((busy) => {
    $('[data-testid="reset"]').disabled = busy;
  });
  onLangChange(() => {
    renderLangButton();
    renderHeader();
    renderServerFacts(document);
    rerenderAll();
    updateScrollHints(document);
  });
  // A table that fits on a laptop may scroll on a phone: say so where it does.
  let hintsQueued = false;
  window.addEventListener('resize', () => {
    if (hintsQueued) return;
    hintsQueued = true;
    requestAnimationFrame(() => {
      hintsQueued = false;
      updateScrollHints(document);
    });
  });
  $('[data-testid="lang-toggle"]').addEventListener('click', () => setLang(lang() === 'ja' ? 'en' : 'ja'));
  $('[data-testid="reset"]').addEventListener('click', onReset);
  renderHeader();
  renderServerFacts(document);
  await connect();
  updateScrollHints(document);
  // The header's count follows the database even when no lesson runs: a
  // transaction held open before a reload still commits after it. While the
  // page cannot work, the countdown ticks instead, and at its end the page
  // tries again on its own.
  let lastRead = 0;
  let connecting = false;
  setInterval(() => {
    if (trouble) {
      renderSandbox();
      if (trouble.until <= performance.now() && !connecting) {
        connecting = true;
        connect().finally(() => { connecting = false; });
      }
      return;
    }
    if (document.hidden) return;
    const every = isBusy() ? HEADER_REFRESH_BUSY_MS : HEADER_REFRESH_MS;
    // An experiment that reads the tables itself (lesson 4 while B waits) keeps the count fresh:
    // no read of the header's own beside it, so a class's pages ask the server half as often.
    if (performance.now() - lastRead < every - 100 || performance.now() - lastShown < every - 100) return;
    lastRead = performance.now();
    getState().then(showState, (error) => {
      // No answer at all: the server stopped (or the way to it). An HTTP error is a step's business.
      if (error?.status) return;
      trouble = troubleFrom(error);
      lastState = 'offline';
      renderHeader();
    });
  }, HEADER_REFRESH_BUSY_MS);
  document.body.dataset.ready = 'true';
}

/** Reads the server's settings and this sandbox's tables; on a refusal or no answer, says which. */
async function connect() {
  try {
    const [, state] = await Promise.all([loadServer(), getState()]);
    trouble = null;
    renderServerFacts(document);
    // An experiment this server cannot run (lesson 7 without a network) says so, its buttons disabled.
    rerenderAll();
    showState(state);
  } catch (error) {
    // A full room or a rate limit is the server's clear answer, not an outage.
    if (!(error instanceof SandboxRefused)) console.error(error);
    trouble = troubleFrom(error);
    lastState = 'offline';
    renderHeader();
  }
}

start();
