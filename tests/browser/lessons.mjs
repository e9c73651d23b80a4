// Clicks through the teaching page in headless Chromium, the way a learner
// would, and checks that each lesson shows what it promises, both on the
// page and in the database (GET /demo/state).
//
//   BASE_URL       the running charges server, on a fresh database (required)
//   ARTIFACTS_DIR  where screenshots go (default: artifacts/browser)
//   CHROMIUM       the browser binary (default: /usr/bin/chromium)
//
// Prints one line per check and a closing "N passed, M failed"; exits 1 on
// any failure. Every wait is bounded, and a watchdog ends the whole run.

import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { chromium } from 'playwright-core';

const BASE_URL = (process.env.BASE_URL || '').replace(/\/+$/, '');
const ARTIFACTS_DIR = path.resolve(process.env.ARTIFACTS_DIR || 'artifacts/browser');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

const RUN_TIMEOUT_MS = 120_000; // the whole script (it takes about 40 s)
const STEP_TIMEOUT_MS = 20_000; // one step of an experiment (lesson 4 needs ~5 s)
const ACTION_TIMEOUT_MS = 10_000; // a click, a locator, an API call

if (!BASE_URL) {
  console.error('lessons.mjs: set BASE_URL to the running server, e.g. BASE_URL=http://127.0.0.1:8080');
  process.exit(2);
}

const watchdog = setTimeout(() => {
  console.error(`not ok - the run took longer than ${RUN_TIMEOUT_MS / 1000} s; giving up`);
  process.exit(1);
}, RUN_TIMEOUT_MS);
watchdog.unref();

/** The backend the server runs on, as the page should name it (set once the page loads). */
let BACKEND_NAME = /PostgreSQL|SQLite/;

let passed = 0;
let failed = 0;

function check(name, ok, detail = '') {
  if (ok) {
    passed += 1;
    console.log(`ok - ${name}${detail ? ` (${detail})` : ''}`);
  } else {
    failed += 1;
    console.log(`not ok - ${name}${detail ? `: ${detail}` : ''}`);
  }
  return ok;
}

/** Runs one lesson; an exception fails it with its message and lets the others run. */
async function lesson(name, fn) {
  console.log(`# ${name}`);
  const before = failed;
  try {
    await fn();
  } catch (error) {
    check(`${name} ran to the end`, false, error?.message?.split('\n')[0] ?? String(error));
  }
  return failed === before;
}

async function api(method, urlPath) {
  const response = await fetch(BASE_URL + urlPath, { method, signal: AbortSignal.timeout(ACTION_TIMEOUT_MS) });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${urlPath} answered ${response.status}: ${text.slice(0, 200)}`);
  return JSON.parse(text);
}

const dbState = () => api('GET', '/demo/state');

// ---- page helpers ------------------------------------------------------------------

const exp = (page, id) => page.locator(`[data-testid="exp-${id}"]`);

async function resetViaPage(page) {
  const answered = page.waitForResponse((r) => r.url().endsWith('/demo/reset') && r.request().method() === 'POST', {
    timeout: ACTION_TIMEOUT_MS,
  });
  await page.getByTestId('reset').click({ timeout: ACTION_TIMEOUT_MS });
  const response = await answered;
  await page.waitForFunction(() => !document.querySelector('[data-testid="reset"]').disabled, null, { timeout: ACTION_TIMEOUT_MS });
  const state = await dbState();
  check('reset button empties the tables', response.status() === 200 && state.charges.length === 0 && state.idempotency_keys.length === 0,
    `HTTP ${response.status()}, ${state.charges.length} charges, ${state.idempotency_keys.length} keys`);
}

/** Starts the experiment afresh if it ran before, so step 1 is the next step. */
async function freshRun(page, id) {
  const again = exp(page, id).getByTestId('run-again');
  if (await again.isVisible()) await again.click({ timeout: ACTION_TIMEOUT_MS });
}

/** Clicks step `n` of experiment `id` and waits until that step has finished. */
async function clickStep(page, id, n, { keyboard = false } = {}) {
  const button = exp(page, id).getByTestId(`step-${n}`);
  if (keyboard) {
    await button.focus({ timeout: ACTION_TIMEOUT_MS });
    await page.keyboard.press('Enter');
  } else {
    await button.click({ timeout: ACTION_TIMEOUT_MS });
  }
  await page.waitForFunction(
    ([testid, step]) => {
      const root = document.querySelector(`[data-testid="${testid}"]`);
      const b = root?.querySelector(`[data-testid="step-${step}"]`);
      return root && root.dataset.state !== 'running' && b?.classList.contains('done');
    },
    [`exp-${id}`, n],
    { timeout: STEP_TIMEOUT_MS },
  );
}

/** What the page shows for one request card (by its tag A, B, C). */
async function card(page, id, tag) {
  const c = exp(page, id).locator(`[data-testid="request"][data-tag="${tag}"]`);
  await c.waitFor({ timeout: ACTION_TIMEOUT_MS });
  return {
    status: Number(await c.getAttribute('data-status')),
    replayed: (await c.getAttribute('data-replayed')) === 'true',
    ms: Number(await c.getByTestId('elapsed').getAttribute('data-ms')),
    shownMs: (await c.getByTestId('elapsed').innerText()).trim(),
    request: await c.getByTestId('raw-request').innerText(),
    response: await c.getByTestId('raw-response').innerText(),
  };
}

/** The charges table the experiment shows (after its last request). */
async function shownCharges(page, id) {
  const panel = exp(page, id).getByTestId('db-panel');
  const count = Number(await panel.getByTestId('charges-count').getAttribute('data-count', { timeout: ACTION_TIMEOUT_MS }));
  const rows = await panel.getByTestId('charge-row').evaluateAll((trs) => trs.map((tr) => tr.dataset.id));
  return { count, rows };
}

async function verdict(page, id) {
  const v = exp(page, id).getByTestId('verdict');
  await v.waitFor({ state: 'visible', timeout: ACTION_TIMEOUT_MS });
  return { ok: (await v.getAttribute('data-ok')) === 'true', text: (await v.innerText()).replace(/\s+/g, ' ').trim() };
}

async function screenshot(page, testid, file) {
  await mkdir(ARTIFACTS_DIR, { recursive: true });
  const target = path.join(ARTIFACTS_DIR, file);
  // The sticky header would otherwise be painted over the middle of a tall section.
  await page.getByTestId(testid).screenshot({
    path: target,
    timeout: ACTION_TIMEOUT_MS,
    animations: 'disabled',
    style: '.topbar { position: static !important; }',
  });
  console.log(`# screenshot ${target}`);
}

function responseId(rawResponse) {
  return rawResponse.match(/"id":\s*"([0-9a-f-]{36})"/)?.[1] ?? null;
}

// ---- the lessons ------------------------------------------------------------------------

async function lesson1(page) {
  await resetViaPage(page);
  await clickStep(page, 'l1', 1);
  const a = await card(page, 'l1', 'A');
  check('lesson 1: the first attempt is answered 504 (simulated lost response)', a.status === 504 && /simulated-lost-response/.test(a.response),
    `status ${a.status}`);
  check('lesson 1: the raw request shows Demo-Fault and no Idempotency-Key',
    /Demo-Fault: lose-response/.test(a.request) && !/Idempotency-Key/i.test(a.request));
  await clickStep(page, 'l1', 2);
  const b = await card(page, 'l1', 'B');
  check('lesson 1: the retry without a key is answered 201', b.status === 201, `status ${b.status}`);
  const shown = await shownCharges(page, 'l1');
  check('lesson 1: the page\'s charges table shows 2 charges', shown.count === 2 && shown.rows.length === 2, `${shown.rows.length} rows`);
  const state = await dbState();
  check('lesson 1: GET /demo/state has 2 charges', state.charges.length === 2, `${state.charges.length} charges`);
  const v = await verdict(page, 'l1');
  check('lesson 1: the result box says the retry charged twice', v.ok, v.text);
  await screenshot(page, 'lesson-1', 'lesson-1.png');
}

async function lesson2(page) {
  const root = page.getByTestId('lesson-2');
  for (let i = 0; i < 3; i += 1) {
    await root.getByTestId('l2-dec-apply').click({ timeout: ACTION_TIMEOUT_MS });
    await root.getByTestId('l2-set-apply').click({ timeout: ACTION_TIMEOUT_MS });
  }
  const dec = (await root.getByTestId('l2-dec-values').locator('li').allInnerTexts()).map((s) => s.replace(/\D/g, ''));
  const set = (await root.getByTestId('l2-set-values').locator('li').allInnerTexts()).map((s) => s.replace(/\D/g, ''));
  check('lesson 2: "decrease by 100" three times gives 500 → 400 → 300 → 200', dec.join(',') === '500,400,300,200', dec.join(' → '));
  check('lesson 2: "set to 400" three times gives 500 → 400 → 400 → 400', set.join(',') === '500,400,400,400', set.join(' → '));
  await root.getByTestId('l2-delete-send').click({ timeout: ACTION_TIMEOUT_MS });
  await root.getByTestId('l2-delete-send').click({ timeout: ACTION_TIMEOUT_MS });
  const log = await root.getByTestId('l2-delete-log').locator('li').allInnerTexts();
  check('lesson 2: the second DELETE answers 404 after the first answered 204',
    log.length === 2 && /204/.test(log[0]) && /404/.test(log[1]), log.join(' | '));
  await screenshot(page, 'lesson-2', 'lesson-2.png');
}

async function lesson3(page) {
  // The same lost answer, retried with the same key.
  await resetViaPage(page);
  await clickStep(page, 'l3-retry', 1);
  const a = await card(page, 'l3-retry', 'A');
  check('lesson 3: the first attempt with a key is answered 504', a.status === 504, `status ${a.status}`);
  check('lesson 3: the raw request carries a quoted Idempotency-Key', /Idempotency-Key: "[0-9a-f-]{36}"/.test(a.request));
  await clickStep(page, 'l3-retry', 2);
  const b = await card(page, 'l3-retry', 'B');
  const state = await dbState();
  check('lesson 3: the retry with the same key is answered 201', b.status === 201, `status ${b.status}`);
  check('lesson 3: the replay shows Idempotent-Replayed: true', b.replayed && /Idempotent-Replayed: true/i.test(b.response));
  const id = responseId(b.response);
  check('lesson 3: the replayed id is the id of the one stored charge',
    state.charges.length === 1 && id === state.charges[0].id && state.idempotency_keys[0]?.charge_id === id, `id ${id}`);
  const shown = await shownCharges(page, 'l3-retry');
  check('lesson 3: the page\'s charges table shows 1 charge', shown.count === 1 && shown.rows[0] === id, `${shown.rows.length} rows`);
  check('lesson 3: GET /demo/state has 1 charge', state.charges.length === 1, `${state.charges.length} charges`);
  check('lesson 3: the result box confirms one charge', (await verdict(page, 'l3-retry')).ok);

  // Two at once, check-then-insert.
  await resetViaPage(page);
  await clickStep(page, 'l3-naive', 1);
  const naive = await dbState();
  const naiveShown = await shownCharges(page, 'l3-naive');
  const keys = new Set(naive.unguarded_keys.map((u) => u.key));
  check('lesson 3: check-then-insert race: both requests answered 201',
    (await card(page, 'l3-naive', 'A')).status === 201 && (await card(page, 'l3-naive', 'B')).status === 201);
  check('lesson 3: check-then-insert race: 2 charges on the page and in GET /demo/state',
    naiveShown.count === 2 && naive.charges.length === 2, `page ${naiveShown.count}, db ${naive.charges.length}`);
  check('lesson 3: check-then-insert race: unguarded_keys holds 2 rows with one key',
    naive.unguarded_keys.length === 2 && keys.size === 1, `${naive.unguarded_keys.length} rows, ${keys.size} distinct keys`);
  check('lesson 3: check-then-insert race: the page shows the unguarded_keys table',
    Number(await exp(page, 'l3-naive').getByTestId('db-panel').getByTestId('unguarded-count').getAttribute('data-count', { timeout: ACTION_TIMEOUT_MS })) === 2);
  check('lesson 3: check-then-insert race: the result box confirms the double charge', (await verdict(page, 'l3-naive')).ok);

  // Two at once, unique constraint.
  await resetViaPage(page);
  await clickStep(page, 'l3-guarded', 1);
  const guarded = await dbState();
  const ga = await card(page, 'l3-guarded', 'A');
  const gb = await card(page, 'l3-guarded', 'B');
  check('lesson 3: unique constraint race: 1 charge in GET /demo/state', guarded.charges.length === 1, `${guarded.charges.length} charges`);
  check('lesson 3: unique constraint race: the page shows 1 charge', (await shownCharges(page, 'l3-guarded')).count === 1);
  check('lesson 3: unique constraint race: one 201 fresh, one 201 replayed with the same id',
    ga.status === 201 && gb.status === 201 && ga.replayed !== gb.replayed && responseId(ga.response) === responseId(gb.response),
    `A ${ga.status}${ga.replayed ? ' replayed' : ''}, B ${gb.status}${gb.replayed ? ' replayed' : ''}`);
  check('lesson 3: unique constraint race: the result box confirms one charge', (await verdict(page, 'l3-guarded')).ok);
  await screenshot(page, 'lesson-3', 'lesson-3.png');
}

const l4Card = (page, tag) => exp(page, 'l4').locator(`[data-testid="request"][data-tag="${tag}"]`);

async function lesson4(page) {
  const root = page.getByTestId('lesson-4');
  await resetViaPage(page);
  const backend = await page.getByTestId('l4-backend').innerText();
  check('lesson 4: the page names the backend in use', BACKEND_NAME.test(backend), backend.slice(0, 60));
  check('lesson 4: the page says how SQLite\'s lock differs',
    /whole database/.test(await root.getByTestId('l4-sqlite').innerText()) && !/later version|planned/i.test(await root.innerText()));

  // ---- atomic: B waits on the unique index, then replays --------------------------------
  const atomic = root.getByTestId('l4-mode-atomic');
  check('lesson 4: the mode switch starts on "atomic"', await atomic.isChecked());
  check('lesson 4: the lesson says the experiment runs in "atomic" mode', /“atomic” mode/.test(await page.getByTestId('l4-backend').innerText()));
  await clickStep(page, 'l4', 1);
  const a = await card(page, 'l4', 'A');
  const b = await card(page, 'l4', 'B');
  check('lesson 4 atomic: A and B carry Demo-Mode: atomic', /Demo-Mode: atomic/.test(a.request) && /Demo-Mode: atomic/.test(b.request));
  check('lesson 4 atomic: A (held 5 s before COMMIT) is answered 201 after ~5 s', a.status === 201 && !a.replayed && a.ms >= 4500,
    `${a.status}, ${a.ms} ms`);
  check('lesson 4 atomic: the retry B shows an elapsed time between 3000 and 6000 ms', b.ms >= 3000 && b.ms <= 6000, `${b.ms} ms, shown "${b.shownMs}"`);
  check('lesson 4 atomic: the retry B got the stored 201 (Idempotent-Replayed)', b.status === 201 && b.replayed, `status ${b.status}`);
  check('lesson 4 atomic: B carries the same charge id as A', responseId(a.response) !== null && responseId(a.response) === responseId(b.response));
  const hatched = await exp(page, 'l4').locator('svg rect[fill="url(#wait-hatch)"]').count();
  check('lesson 4 atomic: the diagram draws B\'s wait on the database as a hatched bar', hatched === 1, `${hatched} hatched bars`);
  const state = await dbState();
  check('lesson 4 atomic: GET /demo/state has 1 charge', state.charges.length === 1, `${state.charges.length} charges`);
  check('lesson 4 atomic: the page shows 1 charge', (await shownCharges(page, 'l4')).count === 1);
  check('lesson 4 atomic: the result box confirms the wait and one charge', (await verdict(page, 'l4')).ok);
  console.log(`# lesson 4 atomic: A took ${a.ms} ms, the retry B waited ${b.ms} ms`);
  await screenshot(page, 'lesson-4', 'lesson-4.png');

  // ---- key-first, chosen with the keyboard: B gets 409 at once, C replays ----------------
  await atomic.focus({ timeout: ACTION_TIMEOUT_MS });
  await page.keyboard.press('ArrowRight');
  const keyFirst = root.getByTestId('l4-mode-key-first');
  check('lesson 4: the arrow key moves the mode switch to "key-first"', (await keyFirst.isChecked()) && !(await atomic.isChecked()));
  check('lesson 4: switching the mode starts the experiment afresh',
    (await exp(page, 'l4').getAttribute('data-state')) === 'idle' && /C/.test(await exp(page, 'l4').getByTestId('step-1').innerText()));
  check('lesson 4: the lesson says the experiment runs in "key-first" mode',
    /“key-first” mode/.test(await page.getByTestId('l4-backend').innerText()) && /409/.test(await root.getByTestId('l4-explain').innerText()));
  await resetViaPage(page);
  const stepDone = clickStep(page, 'l4', 1);
  // B is sent 1 s after A and answered within milliseconds; the page then reads the state.
  await page.waitForFunction(
    () => document.querySelector('[data-testid="exp-l4"] [data-testid="request"][data-tag="B"]')?.dataset.status,
    null,
    { timeout: 4000 },
  );
  const row = exp(page, 'l4').getByTestId('db-panel').locator('[data-testid="key-row"][data-status="in_progress"]');
  const seen = await row.waitFor({ timeout: 2000 }).then(() => true, () => false);
  const aPending = (await l4Card(page, 'A').getAttribute('data-status')) === '';
  const lease = seen ? await row.getAttribute('data-lease-live') : null;
  const leaseShown = seen ? (await row.getByTestId('lease').innerText()).trim() : '';
  check('lesson 4 key-first: while A still runs, the page\'s table shows the key row in_progress with a live lease',
    seen && aPending && lease === 'true', `row seen: ${seen}, A pending: ${aPending}, lease "${leaseShown}"`);
  if (seen) await screenshot(page, 'lesson-4', 'lesson-4-key-first-in-progress.png');
  await stepDone;
  const ka = await card(page, 'l4', 'A');
  const kb = await card(page, 'l4', 'B');
  const kc = await card(page, 'l4', 'C');
  check('lesson 4 key-first: A, B and C carry Demo-Mode: key-first',
    [ka, kb, kc].every((c) => /Demo-Mode: key-first/.test(c.request)));
  check('lesson 4 key-first: B is answered 409 idempotency-key-in-flight in under 1000 ms',
    kb.status === 409 && /\/problems\/idempotency-key-in-flight/.test(kb.response) && kb.ms < 1000, `${kb.status}, ${kb.ms} ms`);
  check('lesson 4 key-first: the 409 carries Retry-After: 1', /Retry-After: 1\b/i.test(kb.response));
  check('lesson 4 key-first: A is answered 201 after ~5 s', ka.status === 201 && !ka.replayed && ka.ms >= 4500, `${ka.status}, ${ka.ms} ms`);
  check('lesson 4 key-first: C, sent after A finished, gets the stored 201 with A\'s id',
    kc.status === 201 && kc.replayed && responseId(kc.response) !== null && responseId(kc.response) === responseId(ka.response),
    `${kc.status}${kc.replayed ? ' replayed' : ''}`);
  const kHatched = await exp(page, 'l4').locator('svg rect[fill="url(#wait-hatch)"]').count();
  check('lesson 4 key-first: the diagram draws no wait on the database', kHatched === 0, `${kHatched} hatched bars`);
  const kState = await dbState();
  check('lesson 4 key-first: GET /demo/state has 1 charge and the key completed',
    kState.charges.length === 1 && kState.idempotency_keys.length === 1 && kState.idempotency_keys[0].status === 'completed'
      && kState.idempotency_keys[0].charge_id === responseId(ka.response),
    `${kState.charges.length} charges, key ${kState.idempotency_keys[0]?.status}`);
  check('lesson 4 key-first: the page shows 1 charge', (await shownCharges(page, 'l4')).count === 1);
  const kv = await verdict(page, 'l4');
  check('lesson 4 key-first: the result box confirms the 409, the replay and one charge', kv.ok, kv.text.slice(0, 120));
  console.log(`# lesson 4 key-first: B answered ${kb.status} after ${kb.ms} ms, A took ${ka.ms} ms, C ${kc.status} after ${kc.ms} ms`);
  await screenshot(page, 'lesson-4', 'lesson-4-key-first.png');
}

async function lesson5(page) {
  await resetViaPage(page);
  await clickStep(page, 'l5-expire', 1);
  const first = await card(page, 'l5-expire', 'A');
  const key = first.request.match(/Idempotency-Key: "([^"]+)"/)?.[1];
  await clickStep(page, 'l5-expire', 2);
  const e = await card(page, 'l5-expire', 'B');
  const expiredState = await dbState();
  check('lesson 5: the expire shortcut answers 200 and marks the key expired',
    e.status === 200 && expiredState.idempotency_keys.length === 1 && expiredState.idempotency_keys[0].expired === true, `status ${e.status}`);
  check('lesson 5: the page still shows the expired key row before the purge',
    (await exp(page, 'l5-expire').getByTestId('db-panel').getByTestId('key-expired').count()) === 1);

  await clickStep(page, 'l5-expire', 3);
  const p = exp(page, 'l5-expire').locator('[data-testid="request"][data-tag="C"]');
  const purged = Number(await p.getAttribute('data-purged'));
  const explain = await p.getByTestId('explain').innerText();
  check('lesson 5: the purge answers 200 and the page shows how many rows it removed (≥ 1)',
    Number(await p.getAttribute('data-status')) === 200 && purged >= 1 && explain.includes(String(purged)), `purged ${purged}: "${explain}"`);
  const panel = exp(page, 'l5-expire').getByTestId('db-panel');
  const shownKeys = Number(await panel.getByTestId('keys-count').getAttribute('data-count'));
  const shownCharges5 = Number(await panel.getByTestId('charges-count').getAttribute('data-count'));
  check('lesson 5: after the purge the page shows no key row and the charge kept', shownKeys === 0 && shownCharges5 === 1,
    `${shownKeys} key rows, ${shownCharges5} charges`);
  const purgedState = await dbState();
  check('lesson 5: after the purge GET /demo/state has no row for the key and still 1 charge',
    key && !purgedState.idempotency_keys.some((k) => k.key === key) && purgedState.charges.length === 1,
    `${purgedState.idempotency_keys.length} keys, ${purgedState.charges.length} charges`);

  await clickStep(page, 'l5-expire', 4);
  const d = await card(page, 'l5-expire', 'D');
  const afterPurge = await dbState();
  check('lesson 5: a retry with the same key after the purge is a new charge (201, not replayed)', d.status === 201 && !d.replayed,
    `status ${d.status}${d.replayed ? ' replayed' : ''}`);
  check('lesson 5: after the retry the database holds 2 charges, the new one with the key',
    afterPurge.charges.length === 2 && afterPurge.idempotency_keys.find((k) => k.key === key)?.charge_id === responseId(d.response),
    `${afterPurge.charges.length} charges`);
  check('lesson 5: the purge result box agrees with the database', (await verdict(page, 'l5-expire')).ok);

  await resetViaPage(page);
  await clickStep(page, 'l5-reuse', 1, { keyboard: true });
  await clickStep(page, 'l5-reuse', 2, { keyboard: true });
  const r = await card(page, 'l5-reuse', 'B');
  const reuseState = await dbState();
  check('lesson 5: reusing a key with another amount is answered 422 idempotency-key-reused (steps pressed with the keyboard)',
    r.status === 422 && /\/problems\/idempotency-key-reused/.test(r.response), `status ${r.status}`);
  check('lesson 5: the reused key did not charge again', reuseState.charges.length === 1, `${reuseState.charges.length} charges`);

  await resetViaPage(page);
  await clickStep(page, 'l5-newkey', 1);
  await clickStep(page, 'l5-newkey', 2);
  const newKeyState = await dbState();
  check('lesson 5: a new key per retry lets the duplicate through (2 charges, 2 keys)',
    newKeyState.charges.length === 2 && newKeyState.idempotency_keys.length === 2,
    `${newKeyState.charges.length} charges, ${newKeyState.idempotency_keys.length} keys`);
  check('lesson 5: every result box agrees with the database',
    (await verdict(page, 'l5-expire')).ok && (await verdict(page, 'l5-reuse')).ok && (await verdict(page, 'l5-newkey')).ok);
  await screenshot(page, 'lesson-5', 'lesson-5.png');
}

/** A phone-sized visit in Japanese: language detection, the toggle, no sideways scrolling. */
async function phone(browser) {
  const context = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, locale: 'ja-JP', isMobile: true, hasTouch: true });
  context.setDefaultTimeout(ACTION_TIMEOUT_MS);
  const page = await context.newPage();
  try {
    await page.goto(`${BASE_URL}/`, { waitUntil: 'load', timeout: ACTION_TIMEOUT_MS });
    await page.waitForSelector('body[data-ready="true"]', { timeout: ACTION_TIMEOUT_MS });
    check('phone: a Japanese browser gets the page in Japanese', (await page.evaluate(() => document.documentElement.lang)) === 'ja');
    await resetViaPage(page);
    await clickStep(page, 'l1', 1);
    await clickStep(page, 'l1', 2);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check('phone: the page does not scroll sideways at 390 px', overflow <= 1, `overflow ${overflow} px`);
    await screenshot(page, 'lesson-1', 'lesson-1-phone-ja.png');
    await page.getByTestId('lang-toggle').click();
    check('phone: the toggle switches to English', (await page.evaluate(() => document.documentElement.lang)) === 'en');
    await page.reload({ waitUntil: 'load', timeout: ACTION_TIMEOUT_MS });
    await page.waitForSelector('body[data-ready="true"]', { timeout: ACTION_TIMEOUT_MS });
    check('phone: the chosen language is remembered after a reload', (await page.evaluate(() => document.documentElement.lang)) === 'en');
  } finally {
    await context.close();
  }
}

// ---- main ----------------------------------------------------------------------------------

const browser = await chromium.launch({
  executablePath: CHROMIUM,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  timeout: 30_000,
});
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' });
  context.setDefaultTimeout(ACTION_TIMEOUT_MS);
  const page = await context.newPage();
  const pageErrors = [];
  page.on('pageerror', (error) => pageErrors.push(error.message));
  page.on('console', (message) => {
    // Chromium logs every 4xx/5xx answer as "Failed to load resource"; the
    // lessons provoke 409, 422 and 504 on purpose, so only other errors count.
    if (message.type() === 'error' && !/^Failed to load resource: the server responded with a status of (409|422|504)\b/.test(message.text())) {
      pageErrors.push(message.text());
    }
  });

  const loaded = await lesson('page', async () => {
    const response = await page.goto(`${BASE_URL}/`, { waitUntil: 'load', timeout: ACTION_TIMEOUT_MS });
    check('the page is served at /', response?.status() === 200, `HTTP ${response?.status()}`);
    await page.waitForSelector('body[data-ready="true"]', { timeout: ACTION_TIMEOUT_MS });
    const status = await page.getByTestId('server-status').innerText();
    const state = await (await fetch(`${BASE_URL}/demo/state`)).json();
    BACKEND_NAME = state.backend === 'sqlite' ? /SQLite/ : /PostgreSQL/;
    check('the header shows the backend and mode from GET /demo/state', BACKEND_NAME.test(status) && /atomic/.test(status), `${state.backend}: ${status}`);
  });
  if (!loaded) {
    console.log(`${passed} passed, ${failed} failed`);
    console.error(`lessons.mjs: the page at ${BASE_URL}/ did not load; is the server running (in demo mode)?`);
    await browser.close();
    process.exit(1);
  }
  await lesson('lesson 1: retrying without a key', () => lesson1(page));
  await lesson('lesson 2: operations that are safe to repeat', () => lesson2(page));
  await lesson('lesson 3: the idempotency key', () => lesson3(page));
  await lesson('lesson 4: a retry while the first is still running', () => lesson4(page));
  await lesson('lesson 5: key lifetime and reuse', () => lesson5(page));
  check('no JavaScript errors on the page', pageErrors.length === 0, pageErrors.slice(0, 3).join(' | '));
  await context.close();
  await lesson('phone', () => phone(browser));
} finally {
  await browser.close();
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
