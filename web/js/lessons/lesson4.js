// Lesson 4: a retry while the first is still running.

import { L } from '../diagram.js';
import { shortKeyOf, onBusyChange, amountOf, slotRefusalOf } from '../experiment.js';
import { t, tHtml, fmtMs, fmtDuration, fmtSpan } from '../i18n.js';
import { lockWaitOf, describeLockWait } from '../tables.js';
import { outcomeOf, problemFor, EXECUTED, REPLAYED, IN_FLIGHT } from '../outcome.js';
import { server, serverOrNull } from '../server.js';
import { getSlot } from '../api.js';
import { charge, reply, narrateCharge, T, experiment, setText, setHtml } from './shared.js';

// Lesson 4's timing is one constant: A holds its transaction open for HOLD_MS
// before it commits. Everything else is a stated fraction of it. With 5 s
// and B sent 1 s in, it is the setting of the design article's measurement
// (B waited 4009 ms), which the lesson quotes.
const HOLD_MS = 5000;
/** B, the retry, is sent a fifth of the way into A's hold. */
const SEND_B_AFTER_MS = HOLD_MS / 5;
/** atomic: B then waits on A's uncommitted key for the rest of the hold… */
const ATOMIC_EXPECTED_WAIT_MS = HOLD_MS - SEND_B_AFTER_MS;
/** key-first: B's 409 must come within a fifth of the hold, well before A commits. */
const KEY_FIRST_MAX_MS = HOLD_MS / 5;

/** The hold in the units the texts use: seconds, B's delay, the Demo-Fault's milliseconds. */
const HOLD = { s: HOLD_MS / 1000, after: SEND_B_AFTER_MS / 1000, ms: HOLD_MS };

/** Throws unless the server lets a request hold its transaction open for `ms`. */
function checkHold(ms = HOLD_MS) {
  const { max_delay_commit_ms: max, max_delayed_transactions: places } = server();
  if (ms >= max) throw new Error(`lesson 4 holds a transaction for ${ms} ms; that must stay below this server’s limit, ${max} ms (max_delay_commit_ms)`);
  if (places < 1) throw new Error('this server lets no demo request hold its transaction open (DEMO_MAX_DELAYED)');
}

/** While B waits, the page reads the tables (and what waits on what) this often. */
const WAIT_POLL_MS = 400;

// ---- a slot to hold A's transaction in -----------------------------------------------------
//
// A server lets only so many transactions be held open at once (DEMO_MAX_DELAYED, one per
// sandbox), and a class shares them. The server takes A's slot inside A's transaction; if
// every slot is held, A is answered 503 with Demo-Slots (held, max) and a Retry-After of
// when the first is given back, having rolled back. B is sent only once the server's state
// says that this sandbox holds its slot: never on a refusal, which would make B a first
// charge of its own and the lesson a story that did not happen.

/** A refused A is sent again after the server's Retry-After, and never sooner than this. */
const SLOT_RETRY_MIN_MS = 3000;
/** …plus up to this much more, so that learners refused together do not come back together. */
const SLOT_RETRY_JITTER_MS = 1000;
/** After this long of refusals, the run gives up and says so. */
const SLOT_GIVE_UP_MS = 120_000;
/** While A is sent and not yet holding its slot, the page asks the server (GET /demo/slot, from memory) this often. */
const SLOT_POLL_MS = 100;

/**
 * Sends A (`sendA()` starts it) until the server gives it a slot: resolves
 * { a, held: true, holdEndsAt } once GET /demo/slot says this sandbox holds
 * its transaction, `after` ms after A was sent (sooner if A's hold of `hold`
 * ms began earlier than the page heard of it, so that B still meets the rest
 * of it); holdEndsAt (performance.now()) is the earliest A's hold can end,
 * from the slot's left_ms, measured after the page asked. { a, held: false }
 * if A was answered without holding one (refused for good, or another answer). Each refusal keeps its card (retitled), is drawn
 * as it went, and is waited out with a live countdown.
 */
async function holdA(ctx, sendA, { after = SEND_B_AFTER_MS, hold = HOLD_MS } = {}) {
  const d = ctx.diagram;
  const firstSent = performance.now();
  ctx.vars.slotRefusals = 0;
  for (;;) {
    const a = sendA();
    const sent = performance.now();
    let answered = false;
    a.answered.then(() => { answered = true; });
    await Promise.race([ctx.sleep(Math.min(after, 300)), a.answered]);
    while (!answered) {
      const asked = performance.now();
      const slot = await getSlot().catch(() => null);
      if (answered) break;
      if (slot?.holds_transaction === true) {
        ctx.vars.holdEndsAt = asked + (slot.left_ms ?? 0);
        // B is sent `after` into A's hold: at the time planned, or at once if the hold is further on.
        const wait = Math.min(after - (performance.now() - sent), (slot.left_ms ?? hold) - (hold - after));
        if (wait > 0) await Promise.race([ctx.sleep(wait), a.answered]);
        if (!answered) return { a, held: true };
        break;
      }
      await Promise.race([ctx.sleep(SLOT_POLL_MS), a.answered]);
    }
    const rec = await a.answered;
    const busy = slotRefusalOf(rec);
    if (!busy) return { a, held: false };
    ctx.vars.slotRefusals += 1;
    ctx.vars.slotBusy = busy;
    const n = ctx.vars.slotRefusals;
    a.retire(T('title.slotRefused', { n }));
    d.note(['api', 'db'], L('d.slotRefused', { held: busy.held, max: busy.max }), { tag: 'A' });
    reply(d, rec, a.bar);
    if (performance.now() - firstSent > SLOT_GIVE_UP_MS) {
      ctx.vars.slotGaveUp = true;
      return { a, held: false, drawn: true };
    }
    const waitMs = Math.max(SLOT_RETRY_MIN_MS, busy.retryAfter * 1000) + Math.random() * SLOT_RETRY_JITTER_MS;
    const until = performance.now() + waitMs;
    ctx.announce(t('progress.slotBusy', { ...busy, n, left: fmtSpan(Math.ceil(waitMs / 1000) * 1000) }));
    while (performance.now() < until) {
      const left = until - performance.now();
      ctx.progress(L('progress.slotBusy', { ...busy, n, left: () => fmtSpan(Math.ceil(Math.max(0, left) / 1000) * 1000) }), left);
      await ctx.sleep(Math.min(250, left));
    }
    ctx.progress(L('progress.slotAgain', { n: n + 1 }));
  }
}

/** The result when A never held its transaction: B was not sent, and why. */
function verdictNotHeld(ctx) {
  const A = ctx.records.A ?? null;
  const busy = ctx.vars.slotBusy ?? { held: '?', max: '?' };
  return {
    ok: false,
    key: 'l4.notHeld.verdict',
    newCharges: ctx.newCharges().length,
    params: {
      gaveUp: Boolean(ctx.vars.slotGaveUp),
      tries: ctx.vars.slotRefusals ?? 0,
      held: busy.held,
      max: busy.max,
      status: A ? (A.status ?? 'error') : '—',
      n: ctx.newCharges().length,
    },
  };
}

/** A sentence on the refusals a run waited out before A held its slot (empty if none). */
function slotNote(ctx) {
  const n = ctx.vars.slotRefusals ?? 0;
  const busy = ctx.vars.slotBusy;
  return () => (n && busy ? t('l4.slotWaited', { n, max: busy.max }) : '');
}

/** Whether the server runs on SQLite, as its last state says (else PostgreSQL). */
function onSqlite(ctx) {
  return (ctx.latest?.backend ?? ctx.latest?.locks?.backend ?? '') === 'sqlite';
}

/**
 * While `until` is pending, reads the tables every WAIT_POLL_MS and shows
 * them, with what the database says waits (GET /demo/state's `locks`).
 * Records in ctx.vars.wait what it saw: how many reads, the last lock wait
 * the database reported, and whether any read showed the key in progress
 * (in the atomic design none may: A's row is not visible until it commits).
 */
async function watchWait(ctx, until, { tag = 'B', holder = 'A' } = {}) {
  const d = ctx.diagram;
  const key = ctx.vars.key;
  let over = false;
  until.then(() => { over = true; }, () => { over = true; });
  const wait = { reads: 0, lock: null, inProgress: false };
  ctx.vars.wait = wait;
  const started = performance.now();
  while (!over) {
    await Promise.race([ctx.sleep(WAIT_POLL_MS), until]);
    if (over) break;
    // A read that fails is skipped: the wait goes on, and the next read may answer.
    const state = await ctx.refresh().catch(() => null);
    if (!state) continue;
    wait.reads += 1;
    if (state.idempotency_keys.some((k) => k.key === key && k.status === 'in_progress')) wait.inProgress = true;
    const lock = lockWaitOf(state);
    if (lock && !over) {
      const waited = performance.now() - started;
      ctx.progress(L('progress.lockWait', { tag, text: () => describeLockWait(lock), waited: () => fmtSpan(waited) }));
      // The diagram notes the wait once, when the database first reports it; the result tells the last report.
      if (!wait.lock) d.note(['db'], L(lock.kind === 'sqlite' ? 'd.lockSeenSqlite' : 'd.lockSeenPg', { tag, other: holder, event: lock.event, pid: lock.pid, by: lock.by?.pid ?? '?', mode: lock.mode || 'lock' }), { tag });
      wait.lock = lock;
    }
  }
}

/**
 * Lesson 4 in the "atomic" design, the article's: the key, the charge and
 * the stored response in one transaction, which the demo holds open. A's
 * rows are not visible to other reads until A commits; B's INSERT of the
 * same key waits on the unique index entry (PostgreSQL) or for the write
 * lock at BEGIN IMMEDIATE (SQLite). While it waits, the page reads the
 * tables and the database's own account of the wait. Then B's INSERT … ON
 * CONFLICT DO NOTHING returns no row, and B replays A's stored response.
 */
async function runLesson4Atomic(ctx) {
  const d = ctx.diagram;
  const key = ctx.vars.key;
  const short = shortKeyOf(key);
  const body = ctx.vars.body;
  const mode = 'atomic';
  checkHold();
  const { a, held, drawn } = await holdA(ctx, () => ctx.start(charge({ ...body, key, mode, session: 'A', faults: [`delay-commit=${HOLD_MS}`] }), { tag: 'A', title: T('title.firstHeld', HOLD) }));
  if (!held) {
    // A holds nothing B could wait on: B is not sent, and A is drawn as it went.
    if (!drawn) reply(d, await a.answered, a.bar);
    await a.done;
    return;
  }
  d.message('api', 'db', L('d.uncommitted', { key: short }), { tag: 'A' });
  d.note(['db'], L('d.holdOpen', HOLD), { tag: 'A' });
  const b = ctx.start(charge({ ...body, key, mode, session: 'B' }), { tag: 'B', title: T('title.retryWhileRunning', HOLD) });
  const sqlite = onSqlite(ctx);
  d.message('api', 'db', L(sqlite ? 'd.mustWaitSqlite' : 'd.mustWait', { key: short, other: 'A' }), { tag: 'B' });
  const wait = d.openBar('B', 'db', { kind: 'wait', record: b.record });
  const watching = watchWait(ctx, b.answered);

  let committedDrawn = false;
  const drawCommit = () => {
    if (committedDrawn) return;
    committedDrawn = true;
    d.message('api', 'db', L('d.commitNow', HOLD), { tag: 'A' });
  };
  const aDone = a.answered.then((rec) => {
    if (outcomeOf(rec) === EXECUTED) drawCommit();
    reply(d, rec, a.bar);
  });
  const bDone = b.answered.then((rec) => {
    if (outcomeOf(rec) === REPLAYED) {
      drawCommit();
      d.closeBar(wait);
      d.message('db', 'api', L(sqlite ? 'd.unblockedSqlite' : 'd.unblocked', { other: 'A' }), { tag: 'B', kind: 'reply' });
    } else {
      d.closeBar(wait);
    }
    reply(d, rec, b.bar);
  });
  await Promise.all([aDone, bDone, a.done, b.done, watching]);
}

/**
 * The rest of A's hold B was sent into (ms), and whether B's answer came no
 * sooner than that hold's end: B waited on A by what happened, not by a
 * share of the planned hold (a B sent late on a loaded server meets less of it).
 */
function holdMet(ctx, B) {
  const ends = ctx.vars.holdEndsAt;
  if (typeof ends !== 'number' || B.endedAt == null) return { metMs: 0, waited: false };
  return { metMs: Math.max(0, Math.round(ends - B.startedAt)), waited: B.endedAt >= ends };
}

function verdictLesson4Atomic(ctx) {
  const { A, B } = ctx.records;
  if (!A || !B) return verdictNotHeld(ctx);
  const n = ctx.newCharges().length;
  const wait = ctx.vars.wait ?? { reads: 0, lock: null, inProgress: false };
  const { metMs, waited } = holdMet(ctx, B);
  const ok = outcomeOf(B) === REPLAYED && waited && n === 1 && A.json?.id === B.json?.id && !wait.inProgress;
  return {
    ok,
    key: 'l4.verdict',
    params: {
      ms: fmtMs(B.elapsedMs),
      n,
      status: B.status,
      replayed: B.replayed,
      expectMs: fmtMs(metMs),
      reads: wait.reads,
      inProgress: wait.inProgress,
      lock: () => (wait.lock ? describeLockWait(wait.lock) : t('locks.notSeen')),
      slots: slotNote(ctx),
    },
  };
}

// ---- the rollback path: A fails before COMMIT while B waits ---------------------------------

/** The rollback experiment's hold: A keeps its transaction open this long, then fails. */
const ROLLBACK_HOLD_MS = 4000;
const ROLLBACK = { s: ROLLBACK_HOLD_MS / 1000, after: SEND_B_AFTER_MS / 1000, ms: ROLLBACK_HOLD_MS };

/**
 * A holds its transaction, then fails before COMMIT (Demo-Fault:
 * delay-commit, fail-before-commit): everything it wrote rolls back. B,
 * sent meanwhile with the same key and body, waits as before; when A's
 * transaction ends without a commit, B's INSERT returns a row, and B runs
 * as the first: one charge, B's, a 201 that is not a replay.
 */
async function runLesson4Rollback(ctx) {
  const d = ctx.diagram;
  const key = ctx.vars.key;
  const short = shortKeyOf(key);
  const body = ctx.vars.body;
  const mode = 'atomic';
  checkHold(ROLLBACK_HOLD_MS);
  const { a, held, drawn } = await holdA(ctx, () => ctx.start(charge({ ...body, key, mode, session: 'A', faults: [`delay-commit=${ROLLBACK_HOLD_MS}`, 'fail-before-commit'] }), { tag: 'A', title: T('title.firstRollsBack', ROLLBACK) }), { hold: ROLLBACK_HOLD_MS });
  if (!held) {
    if (!drawn) reply(d, await a.answered, a.bar);
    await a.done;
    return;
  }
  d.message('api', 'db', L('d.uncommitted', { key: short }), { tag: 'A' });
  d.note(['db'], L('d.holdThenFail', ROLLBACK), { tag: 'A' });
  const b = ctx.start(charge({ ...body, key, mode, session: 'B' }), { tag: 'B', title: T('title.retryWhileRunning', ROLLBACK) });
  const sqlite = onSqlite(ctx);
  d.message('api', 'db', L(sqlite ? 'd.mustWaitSqlite' : 'd.mustWait', { key: short, other: 'A' }), { tag: 'B' });
  const wait = d.openBar('B', 'db', { kind: 'wait', record: b.record });
  const watching = watchWait(ctx, b.answered);
  let rolledBackDrawn = false;
  const drawRollback = () => {
    if (rolledBackDrawn) return;
    rolledBackDrawn = true;
    d.message('api', 'db', L('d.rollbackNow', ROLLBACK), { tag: 'A' });
  };
  const aDone = a.answered.then((rec) => {
    if (rec.status >= 400) drawRollback();
    reply(d, rec, a.bar);
  });
  const bDone = b.answered.then((rec) => {
    d.closeBar(wait);
    if (outcomeOf(rec) === EXECUTED) {
      drawRollback();
      d.message('db', 'api', L(sqlite ? 'd.proceedsFirstSqlite' : 'd.proceedsFirst', { other: 'A', key: short }), { tag: 'B', kind: 'reply' });
      d.message('api', 'db', L('d.chargeAndSave', { amount: amountOf(rec.spec) }), { tag: 'B' });
    }
    reply(d, rec, b.bar);
  });
  await Promise.all([aDone, bDone, a.done, b.done, watching]);
}

function verdictLesson4Rollback(ctx) {
  const { A, B } = ctx.records;
  if (!A || !B) return verdictNotHeld(ctx);
  const fresh = ctx.newCharges();
  const wait = ctx.vars.wait ?? { reads: 0, lock: null, inProgress: false };
  const keyRow = ctx.latest?.idempotency_keys.find((k) => k.key === ctx.vars.key) ?? null;
  const aFailed = A.status !== null && A.status >= 400;
  const ok = aFailed && outcomeOf(B) === EXECUTED && !B.replayed && holdMet(ctx, B).waited
    && fresh.length === 1 && fresh[0].id === B.json?.id && keyRow?.charge_id === B.json?.id && !wait.inProgress;
  return {
    ok,
    key: 'l4.rollback.verdict',
    params: {
      a: A.status ?? 'error',
      aType: A.problemType ?? '—',
      b: B.status ?? 'error',
      replayed: B.replayed,
      ms: fmtMs(B.elapsedMs ?? 0),
      n: fresh.length,
      same: Boolean(B.json?.id) && keyRow?.charge_id === B.json?.id,
      lock: () => (wait.lock ? describeLockWait(wait.lock) : t('locks.notSeen')),
      slots: slotNote(ctx),
    },
  };
}

export const lesson4Rollback = experiment({
  id: 'l4-rollback',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l4rollback' },
  locks: true,
  steps: [{ label: L('l4.rollback.step1', ROLLBACK), run: (ctx) => runLesson4Rollback(ctx) }],
  verdict: verdictLesson4Rollback,
});

/**
 * Lesson 4 in the "key-first" mode: A's first transaction commits the key
 * row as in_progress; its second one (the charge) is held open. B sees the
 * committed row and is answered 409 at once, with no lock to wait on. After
 * A has finished, C (same key, same body) gets A's stored 201.
 */
async function runLesson4KeyFirst(ctx) {
  const d = ctx.diagram;
  const key = ctx.vars.key;
  const short = shortKeyOf(key);
  const body = ctx.vars.body;
  const mode = 'key-first';
  const lease = server().idempotency_lease_seconds;
  checkHold();
  const { a, held, drawn } = await holdA(ctx, () => ctx.start(charge({ ...body, key, mode, session: 'A', faults: [`delay-commit=${HOLD_MS}`] }), { tag: 'A', title: T('title.firstHeldKeyFirst', HOLD) }));
  if (!held) {
    if (!drawn) reply(d, await a.answered, a.bar);
    await a.done;
    return;
  }
  d.message('api', 'db', L('d.kfRegister', { key: short, s: lease }), { tag: 'A' });
  d.message('api', 'db', L('d.kfCharge'), { tag: 'A' });
  d.note(['db'], L('d.kfHold', HOLD), { tag: 'A' });
  const b = ctx.start(charge({ ...body, key, mode, session: 'B' }), {
    tag: 'B',
    title: T('title.retryWhileRunning', HOLD),
    narrate: (d, rec, bar) => narrateCharge(d, rec, bar, { holder: 'A' }),
  });

  const aDone = a.answered.then((rec) => {
    if (outcomeOf(rec) === EXECUTED) d.message('api', 'db', L('d.kfCommit', HOLD), { tag: 'A' });
    reply(d, rec, a.bar);
  });
  // b.done resolves once the state read right after B's answer is shown:
  // the committed in_progress row, while A is still running.
  await b.done;
  ctx.vars.rowAfterB = ctx.latest?.idempotency_keys.find((k) => k.key === key) ?? null;
  ctx.vars.aRunningAfterB = a.record.elapsedMs === null;
  await Promise.all([aDone, a.done]);
  await ctx.send(charge({ ...body, key, mode, session: 'C' }), { tag: 'C', title: T('title.retryLater'), narrate: narrateCharge });
}

function verdictLesson4KeyFirst(ctx) {
  const { A, B, C } = ctx.records;
  if (!A || !B) return verdictNotHeld(ctx);
  const n = ctx.newCharges().length;
  const row = ctx.vars.rowAfterB;
  const same = Boolean(A.json?.id) && A.json.id === C?.json?.id;
  const ok =
    outcomeOf(B) === IN_FLIGHT &&
    B.elapsedMs < KEY_FIRST_MAX_MS &&
    row?.status === 'in_progress' &&
    Boolean(C) &&
    outcomeOf(C) === REPLAYED &&
    same &&
    n === 1;
  return {
    ok,
    key: 'l4.kf.verdict',
    params: {
      ms: fmtMs(B.elapsedMs),
      retryAfter: B.header('Retry-After') ?? '—',
      n,
      bStatus: B.status ?? 'error',
      rowStatus: row?.status ?? '—',
      cStatus: C?.status ?? '—',
      replayed: C?.replayed ?? false,
      same,
      maxMs: KEY_FIRST_MAX_MS,
      slots: slotNote(ctx),
    },
  };
}

// ==== MODE SWITCH: lesson 4 ===================================================================
// Lesson 4 is written once per idempotency mode; the radios in index.html
// ("MODE SWITCH: lesson 4") set lesson4.mode, and every request of the run
// carries that mode as Demo-Mode, whatever the server's default
// (/demo/config's idempotency_mode) is.
// The SQLite backend needs no mode of its own here: only the lock's scope differs
// (the whole database is locked, not one key), and /demo/config's backend_name names it.
const LESSON4_MODES = {
  atomic: { run: runLesson4Atomic, verdict: verdictLesson4Atomic, label: L('l4.step1.atomic', HOLD), text: 'l4.p2.atomic.html' },
  'key-first': { run: runLesson4KeyFirst, verdict: verdictLesson4KeyFirst, label: L('l4.step1.keyFirst', HOLD), text: 'l4.p2.keyFirst.html' },
};
// ===============================================================================================

export const lesson4 = experiment({
  id: 'l4',
  mode: 'atomic',
  locks: true,
  body: { amount: 1000, currency: 'jpy', desc: 'body.l4' },
  setup(ctx) {
    ctx.vars.mode = lesson4.mode;
  },
  steps: [
    {
      get label() {
        return LESSON4_MODES[lesson4.mode].label;
      },
      run: (ctx) => LESSON4_MODES[ctx.vars.mode].run(ctx),
    },
  ],
  verdict: (ctx) => LESSON4_MODES[ctx.vars.mode].verdict(ctx),
});

/** The radios above lesson 4's experiment: a new mode starts the experiment afresh. */
export function mountLesson4Modes(root, experiment) {
  const box = root.querySelector('[data-role="l4-modes"]');
  if (!box) return;
  for (const input of box.querySelectorAll('input[name="l4-mode"]')) {
    // A browser may restore an old choice after a reload; the page starts in lesson4.mode.
    input.checked = input.value === lesson4.mode;
    input.addEventListener('change', () => {
      if (!input.checked || !LESSON4_MODES[input.value] || input.value === lesson4.mode) return;
      lesson4.mode = input.value;
      box.dataset.mode = lesson4.mode;
      experiment.startOver({ focus: false });
      renderLesson4(root);
    });
  }
  box.dataset.mode = lesson4.mode;
  onBusyChange((busy) => {
    box.disabled = busy;
  });
}

/** Lesson 4's mode-dependent text, and the sentences that quote the server's settings. */
export function renderLesson4(root, config = serverOrNull()) {
  setHtml(root.querySelector('[data-role="l4-intro"]'), tHtml('l4.p1.html', HOLD));
  setHtml(root.querySelector('[data-role="l4-rollback-intro"]'), tHtml('l4.rollback.p.html', ROLLBACK));
  setText(
    root.querySelector('[data-role="l4-backend"]'),
    t('l4.backend', { backend: config?.backend_name ?? '…', serverMode: config?.idempotency_mode ?? '…', mode: lesson4.mode }),
  );
  setHtml(
    root.querySelector('[data-role="l4-explain"]'),
    tHtml(LESSON4_MODES[lesson4.mode].text, {
      ...HOLD,
      wait: ATOMIC_EXPECTED_WAIT_MS / 1000,
      type: config ? problemFor(IN_FLIGHT).type : '…',
      retryAfter: config?.in_flight_retry_after_seconds ?? '…',
    }),
  );
  const lease = config ? fmtDuration(config.idempotency_lease_seconds) : '…';
  const isDefault = config ? config.idempotency_lease_seconds === config.default_idempotency_lease_seconds : false;
  const defaultLease = config?.default_idempotency_lease_seconds ?? '…';
  setHtml(root.querySelector('[data-role="l4-lease"]'), tHtml('l4.tradeoff.p2.html', { lease, isDefault, defaultLease }));
}
