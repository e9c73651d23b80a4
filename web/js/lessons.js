// The lessons: what each experiment sends, and how the diagram tells what
// the server did with it.
//
// The server's inner steps (which rows it inserted, what it waited for) are
// not visible from the page. The diagram draws them from what the server is
// known to do for the request that was sent, and from what came of it
// (outcomeOf: status, problem type, Idempotent-Replayed), never from guesses
// about timing.

import { chargeRequest, expireRequest, purgeRequest, refundRequest, describeRequest, lookupRequest, newKey } from './api.js';
import { L } from './diagram.js';
import { Experiment, amountOf, shortKeyOf, onBusyChange } from './experiment.js';
import { t, tHtml, fmtAmount, fmtInt, fmtMs, fmtDuration, fmtSpan } from './i18n.js';
import { outcomeOf, problemFor, EXECUTED, REPLAYED, MISMATCH, IN_FLIGHT, LOST, UNAVAILABLE } from './outcome.js';
import { server, serverOrNull } from './server.js';
import { timeOf, nowOf } from './tables.js';

/** A POST /charges as the demo account. */
function charge(fields) {
  return chargeRequest({ apiKey: server().account.api_key, ...fields });
}

/** A POST /charges/{id}/refunds as the demo account. */
function refund(fields) {
  return refundRequest({ apiKey: server().account.api_key, ...fields });
}

// ---- narration ----------------------------------------------------------------

/** The answer's arrow back to the client; closes the request's bar. */
function reply(d, rec, bar) {
  const tag = bar.tag;
  const ms = () => fmtMs(rec.elapsedMs);
  const outcome = outcomeOf(rec);
  if (rec.error) {
    d.note(['client', 'api'], L('d.failed', { message: rec.error }), { tag });
  } else if (outcome === LOST) {
    // What was thrown away: the 201 (or a PUT's 200); an abandoned request had no answer at all.
    const faults = rec.spec.intent?.faults ?? [];
    const text = faults.includes('abandon') || faults.includes('abandon-after-network') ? L('d.abandonedReply') : L('d.lost', { status: rec.spec.kind === 'describe' ? 200 : 201 });
    d.message('api', 'client', text, { tag, kind: 'lost', detail: [() => `${rec.status} ${rec.statusText} · ${ms()} ms`] });
  } else if (outcome === REPLAYED) {
    d.message('api', 'client', L('d.replyReplayed', { ms }), { tag, kind: 'reply' });
  } else {
    const detail = rec.problemType ? [() => rec.problemType] : [];
    const retryAfter = rec.header('Retry-After');
    if (retryAfter !== null) detail.push(() => `Retry-After: ${retryAfter}`);
    if (rec.spec.kind === 'purge' && typeof rec.json?.purged === 'number') detail.push(() => `"purged": ${rec.json.purged}`);
    d.message('api', 'client', L('d.reply', { status: `${rec.status} ${rec.statusText}`, ms }), { tag, kind: 'reply', detail });
  }
  d.closeBar(bar);
}

/**
 * What the server did with one POST /charges, drawn once its answer is in.
 *  - keyWas: 'expired' if the key had been expired on purpose before this
 *    request, 'purged' if it was expired and then purged.
 *  - holder: the tag of the request that still holds the key, for a 409.
 */
function narrateCharge(d, rec, bar, { keyWas = null, holder = '…' } = {}) {
  const intent = rec.spec.intent;
  const tag = bar.tag;
  const key = intent.key ? shortKeyOf(intent.key) : null;
  const amount = amountOf(rec.spec);
  const outcome = outcomeOf(rec);
  // A lost answer was charged all the same: the demo throws the answer away after the commit.
  const charged = outcome === EXECUTED || outcome === LOST;
  const toDb = (text) => d.message('api', 'db', text, { tag });
  const fromDb = (text) => d.message('db', 'api', text, { tag, kind: 'reply' });
  if (intent.mode === 'check-then-insert') {
    if (charged) {
      toDb(L('d.select', { key }));
      toDb(L('d.insertUnguarded', { amount }));
    }
  } else if (outcome === REPLAYED) {
    toDb(L('d.readKey', { key }));
    fromDb(L('d.readStored'));
  } else if (charged) {
    if (key) {
      toDb(L({ expired: 'd.expiredIsNew', purged: 'd.purgedIsNew' }[keyWas] ?? 'd.insertKeyNew', { key }));
      toDb(L('d.chargeAndSave', { amount }));
    } else {
      toDb(L('d.insertCharge', { amount }));
    }
  } else if (outcome === MISMATCH) {
    toDb(L('d.readKey', { key }));
    fromDb(L('d.fingerprintDiffers'));
  } else if (outcome === IN_FLIGHT) {
    toDb(L('d.kfRegisterB', { key }));
    fromDb(L('d.kfInProgress', { other: holder }));
  }
  reply(d, rec, bar);
}

function narrateExpire(d, rec, bar) {
  if (outcomeOf(rec) === EXECUTED) d.message('api', 'db', L('d.markExpired', { key: shortKeyOf(rec.spec.intent.key) }), { tag: bar.tag });
  reply(d, rec, bar);
}

function narratePurge(d, rec, bar) {
  if (outcomeOf(rec) === EXECUTED) {
    const n = Number(rec.json?.purged ?? 0);
    d.message('api', 'db', L('d.purgeDelete', { batch: server().purge_batch }), { tag: bar.tag });
    d.message('db', 'api', L('d.purgedRows', { n }), { tag: bar.tag, kind: 'reply' });
  }
  reply(d, rec, bar);
}

// Card titles, as thunks so they follow a language switch.
const T = L;

// ---- lessons as data --------------------------------------------------------------------
//
// An experiment is { id, body, steps, verdict }. `body` is the charge its
// requests ask for (amount, currency, description), and each run of it makes
// one Idempotency-Key, ctx.vars.key. Most steps send one POST /charges and
// show what came of it; such a step is a row of data, run by sendCharge():
//
//   label          the step's button (i18n key; may quote the {amount})
//   tag, title     the request's letter in the diagram, its card's title (i18n key; may quote the {amount})
//   key            'same': the run's key; 'fresh': a key made for this request alone; absent: no key
//   body           fields that differ from the experiment's body
//   faults, mode   Demo-Fault items, Demo-Mode
//   keyWas(ctx)    'expired' or 'purged': what was done to the key before (lesson 5)
//
// A step of another shape (two requests at once, lesson 4's timed pair, the
// demo's expire and purge) has a run(ctx) of its own.

const LOSE_RESPONSE = 'lose-response';

/** Runs one charge step as its row describes it. */
function sendCharge(ctx, step) {
  const key = step.key === 'same' ? ctx.vars.key : step.key === 'fresh' ? newKey() : undefined;
  const spec = charge({ ...ctx.vars.body, ...step.body, key, faults: step.faults, mode: step.mode });
  const keyWas = step.keyWas?.(ctx) ?? null;
  return ctx.send(spec, {
    tag: step.tag,
    title: T(step.title, { amount: amountOf(spec) }),
    harm: step.harm ?? null,
    narrate: (d, rec, bar) => (step.narrate ?? narrateCharge)(d, rec, bar, { keyWas }),
  });
}

/**
 * A charge's body as sent: the description is written in the page's
 * language when the request goes out ("Lesson 4: a book" / "レッスン 4: 本").
 */
function bodyOf({ desc, ...body }) {
  return desc ? { ...body, description: t(desc) } : body;
}

/** An experiment for experiment.js, its charge steps made runnable. */
function experiment({ body, steps, setup, ...rest }) {
  return {
    ...rest,
    setup(ctx) {
      // The request is fixed the first time a step asks for it (step 1),
      // in the language of that moment; every later step resends exactly
      // those bytes, whatever language the page is switched to in between.
      let fixed = null;
      Object.defineProperty(ctx.vars, 'body', { get: () => (fixed ??= bodyOf(body)), enumerable: true, configurable: true });
      ctx.vars.key = newKey();
      setup?.(ctx);
    },
    steps: steps.map((step) => {
      if (step.run) return step;
      const { amount, currency } = { ...bodyOf(body), ...step.body };
      return { label: L(step.label, { amount: () => fmtAmount(amount, currency) }), run: (ctx) => sendCharge(ctx, step) };
    }),
  };
}

// ---- lesson 1: retrying without a key -----------------------------------------------

const lesson1 = experiment({
  id: 'l1',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l1' },
  steps: [
    { label: 'l1.step1', tag: 'A', title: 'title.first', faults: [LOSE_RESPONSE] },
    { label: 'l1.step2', tag: 'B', title: 'title.retryNoKey', harm: 'duplicate' },
  ],
  tone: 'bad',
  verdict(ctx) {
    const n = ctx.newCharges().length;
    return { ok: n === 2, key: 'l1.verdict', params: { n } };
  },
});

// ---- lesson 3: the idempotency key ------------------------------------------------------

const lesson3Retry = experiment({
  id: 'l3-retry',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l3' },
  steps: [
    { label: 'l3.retry.step1', tag: 'A', title: 'title.first', key: 'same', faults: [LOSE_RESPONSE] },
    { label: 'l3.retry.step2', tag: 'B', title: 'title.retrySameKey', key: 'same' },
  ],
  verdict(ctx) {
    const fresh = ctx.newCharges();
    const b = ctx.records.B;
    const id = b.json?.id ?? '';
    const same = fresh.length === 1 && fresh[0].id === id;
    return {
      ok: fresh.length === 1 && outcomeOf(b) === REPLAYED && same,
      key: 'l3.retry.verdict',
      params: { n: fresh.length, id: id.slice(0, 8), status: b.status ?? '—', replayed: b.replayed, same },
    };
  },
});

/** Two requests with the run's key, sent at the same moment; narrated once both are back. */
async function sendPair(ctx, { mode }) {
  const key = ctx.vars.key;
  const spec = () => charge({ ...ctx.vars.body, key, mode });
  // Under check-then-insert both charge: whichever it is, the second charge is the duplicate.
  const harm = mode === 'check-then-insert' ? 'duplicate' : null;
  const a = ctx.start(spec(), { tag: 'A', title: T('title.concurrent') });
  const b = ctx.start(spec(), { tag: 'B', title: T('title.concurrent'), harm });
  await Promise.all([a.answered, b.answered]);
  const d = ctx.diagram;
  const [ra, rb] = [a.record, b.record];
  const [oa, ob] = [outcomeOf(ra), outcomeOf(rb)];
  if (mode === 'check-then-insert' && oa === EXECUTED && ob === EXECUTED) {
    const amount = amountOf(ra.spec);
    d.message('api', 'db', L('d.select', { key: shortKeyOf(key) }), { tag: 'A' });
    d.message('api', 'db', L('d.select', { key: shortKeyOf(key) }), { tag: 'B' });
    d.note(['api'], L('d.pause', { ms: server().check_then_insert_pause_ms }));
    d.message('api', 'db', L('d.insertUnguarded', { amount }), { tag: 'A' });
    d.message('api', 'db', L('d.insertUnguarded', { amount }), { tag: 'B' });
    reply(d, ra, a.bar);
    reply(d, rb, b.bar);
  } else if (!mode && [oa, ob].includes(EXECUTED) && [oa, ob].includes(REPLAYED)) {
    const [win, lose] = oa === EXECUTED ? [a, b] : [b, a];
    d.message('api', 'db', L('d.insertKeyNew', { key: shortKeyOf(key) }), { tag: win.bar.tag });
    d.message('api', 'db', L('d.raceLoser', { key: shortKeyOf(key), other: win.bar.tag }), { tag: lose.bar.tag });
    d.message('api', 'db', L('d.chargeAndSave', { amount: amountOf(ra.spec) }), { tag: win.bar.tag });
    d.message('db', 'api', L('d.readStored'), { tag: lose.bar.tag, kind: 'reply' });
    reply(d, win.record, win.bar);
    reply(d, lose.record, lose.bar);
  } else {
    // Not what the lesson expects: tell each one's story on its own.
    narrateCharge(d, ra, a.bar, { holder: 'B' });
    narrateCharge(d, rb, b.bar, { holder: 'A' });
  }
  await Promise.all([a.done, b.done]);
}

const lesson3Naive = experiment({
  id: 'l3-naive',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l3naive' },
  tone: 'bad',
  steps: [{ label: 'l3.naive.step1', run: (ctx) => sendPair(ctx, { mode: 'check-then-insert' }) }],
  verdict(ctx) {
    const n = ctx.newCharges().length;
    const rows = (ctx.latest?.unguarded_keys ?? []).filter((u) => u.key === ctx.vars.key).length;
    return { ok: n === 2 && rows === 2, key: 'l3.naive.verdict', params: { n, rows } };
  },
});

const lesson3Guarded = experiment({
  id: 'l3-guarded',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l3guarded' },
  steps: [{ label: 'l3.guarded.step1', run: (ctx) => sendPair(ctx, { mode: null }) }],
  verdict(ctx) {
    const n = ctx.newCharges().length;
    const { A, B } = ctx.records;
    const replays = [A, B].filter((r) => outcomeOf(r) === REPLAYED).length;
    const sameId = A.json?.id && A.json.id === B.json?.id;
    return { ok: n === 1 && replays === 1 && Boolean(sameId), key: 'l3.guarded.verdict', params: { n, replays } };
  },
});

// ---- lesson 4: a retry while the first is still running -----------------------------------

// Lesson 4's timing is one constant: A holds its transaction open for HOLD_MS
// before it commits. Everything else is a stated fraction of it. With 5 s
// and B sent 1 s in, it is the setting of the design article's measurement
// (B waited 4009 ms), which the lesson quotes.
const HOLD_MS = 5000;
/** B, the retry, is sent a fifth of the way into A's hold. */
const SEND_B_AFTER_MS = HOLD_MS / 5;
/** atomic: B then waits on A's uncommitted key for the rest of the hold… */
const ATOMIC_EXPECTED_WAIT_MS = HOLD_MS - SEND_B_AFTER_MS;
/** …and it must have waited at least three fifths of the hold to count as waiting for A. */
const ATOMIC_MIN_WAIT_MS = (HOLD_MS * 3) / 5;
/** key-first: B's 409 must come within a fifth of the hold, well before A commits. */
const KEY_FIRST_MAX_MS = HOLD_MS / 5;

/** The hold in the units the texts use: seconds, B's delay, the Demo-Fault's milliseconds. */
const HOLD = { s: HOLD_MS / 1000, after: SEND_B_AFTER_MS / 1000, ms: HOLD_MS };

/** Throws unless the server lets a request hold its transaction open for HOLD_MS. */
function checkHold() {
  const { max_delay_commit_ms: max, max_delayed_transactions: places } = server();
  if (HOLD_MS >= max) throw new Error(`lesson 4 holds a transaction for ${HOLD_MS} ms; that must stay below this server’s limit, ${max} ms (max_delay_commit_ms)`);
  if (places < 1) throw new Error('this server lets no demo request hold its transaction open (DEMO_MAX_DELAYED)');
}

/**
 * Lesson 4 in the "atomic" mode: the key and the charge share one
 * transaction, so B's insert of the same key waits on the unique index until
 * A commits, then B replays A's stored response.
 */
async function runLesson4Atomic(ctx) {
  const d = ctx.diagram;
  const key = ctx.vars.key;
  const short = shortKeyOf(key);
  const body = ctx.vars.body;
  const mode = 'atomic';
  checkHold();
  const a = ctx.start(charge({ ...body, key, mode, faults: [`delay-commit=${HOLD_MS}`] }), { tag: 'A', title: T('title.firstHeld', HOLD) });
  d.message('api', 'db', L('d.uncommitted', { key: short }), { tag: 'A' });
  d.note(['db'], L('d.holdOpen', HOLD), { tag: 'A' });
  await Promise.race([ctx.sleep(SEND_B_AFTER_MS), a.answered]);
  const b = ctx.start(charge({ ...body, key, mode }), { tag: 'B', title: T('title.retryWhileRunning', HOLD) });
  d.message('api', 'db', L('d.mustWait', { key: short, other: 'A' }), { tag: 'B' });
  const wait = d.openBar('B', 'db', { kind: 'wait', record: b.record });

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
      d.message('db', 'api', L('d.unblocked', { other: 'A' }), { tag: 'B', kind: 'reply' });
    } else {
      d.closeBar(wait);
    }
    reply(d, rec, b.bar);
  });
  await Promise.all([aDone, bDone, a.done, b.done]);
}

function verdictLesson4Atomic(ctx) {
  const { A, B } = ctx.records;
  const n = ctx.newCharges().length;
  const ok = outcomeOf(B) === REPLAYED && B.elapsedMs >= ATOMIC_MIN_WAIT_MS && n === 1 && A.json?.id === B.json?.id;
  return {
    ok,
    key: 'l4.verdict',
    params: { ms: fmtMs(B.elapsedMs), n, status: B.status, replayed: B.replayed, expectMs: ATOMIC_EXPECTED_WAIT_MS },
  };
}

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
  const a = ctx.start(charge({ ...body, key, mode, faults: [`delay-commit=${HOLD_MS}`] }), { tag: 'A', title: T('title.firstHeldKeyFirst', HOLD) });
  d.message('api', 'db', L('d.kfRegister', { key: short, s: lease }), { tag: 'A' });
  d.message('api', 'db', L('d.kfCharge'), { tag: 'A' });
  d.note(['db'], L('d.kfHold', HOLD), { tag: 'A' });
  await Promise.race([ctx.sleep(SEND_B_AFTER_MS), a.answered]);
  const b = ctx.start(charge({ ...body, key, mode }), {
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
  await ctx.send(charge({ ...body, key, mode }), { tag: 'C', title: T('title.retryLater'), narrate: narrateCharge });
}

function verdictLesson4KeyFirst(ctx) {
  const { A, B, C } = ctx.records;
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

const lesson4 = experiment({
  id: 'l4',
  mode: 'atomic',
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
function mountLesson4Modes(root, experiment) {
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

// ---- lesson 5: key lifetime and reuse ---------------------------------------------------------

/**
 * The harm of a second charge made under the first one's key (its record
 * forgotten): with a card network, the derived network key made the
 * network replay the first authorization, so the harm is in our ledger only.
 */
function sameKeyDuplicate(record) {
  return record.json?.authorization_id ? 'ledgerDuplicate' : 'duplicate';
}

/**
 * Whether the run's two charges hold one authorization at the card network
 * (the late retry's derived network key made the network replay; lesson 7).
 */
function sameAuthorization(ctx) {
  const auths = ctx.newCharges().map((c) => c.authorization_id);
  return auths.length === 2 && Boolean(auths[0]) && auths[0] === auths[1];
}

const lesson5Expire = experiment({
  id: 'l5-expire',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l5expire' },
  steps: [
    { label: 'l5.expire.step1', tag: 'A', title: 'title.first', key: 'same' },
    {
      label: 'l5.expire.step2',
      run: (ctx) => ctx.send(expireRequest(ctx.vars.key), { tag: 'B', title: T('title.expire'), narrate: narrateExpire }),
    },
    {
      label: 'l5.expire.step3',
      run: async (ctx) => {
        const rec = await ctx.send(purgeRequest(), { tag: 'C', title: T('title.purge'), narrate: narratePurge });
        // ctx.latest is now the state read right after the purge.
        ctx.vars.purge = {
          ok: outcomeOf(rec) === EXECUTED,
          purged: typeof rec.json?.purged === 'number' ? rec.json.purged : null,
          keyLeft: Boolean(ctx.latest?.idempotency_keys.some((k) => k.key === ctx.vars.key)),
          kept: ctx.newCharges().length,
        };
      },
    },
    {
      label: 'l5.expire.step4',
      tag: 'D',
      title: 'title.retryAfterPurge',
      key: 'same',
      harm: sameKeyDuplicate,
      keyWas: (ctx) => (ctx.vars.purge?.keyLeft ? 'expired' : 'purged'),
    },
  ],
  tone: 'bad',
  verdict(ctx) {
    const n = ctx.newCharges().length;
    const retry = ctx.records.D;
    const purge = ctx.vars.purge ?? {};
    const ok = purge.ok && purge.keyLeft === false && purge.kept === 1 && n === 2 && outcomeOf(retry) === EXECUTED;
    return {
      ok,
      key: 'l5.expire.verdict',
      params: { n, status: retry.status, purged: purge.purged ?? '—', keyLeft: purge.keyLeft, kept: purge.kept, sameAuth: sameAuthorization(ctx) },
    };
  },
});

const lesson5Reuse = experiment({
  id: 'l5-reuse',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l5reuse' },
  steps: [
    { label: 'l5.reuse.step1', tag: 'A', title: 'title.charge', key: 'same' },
    { label: 'l5.reuse.step2', tag: 'B', title: 'title.otherAmount', key: 'same', body: { amount: 2500 } },
  ],
  verdict(ctx) {
    const n = ctx.newCharges().length;
    const b = ctx.records.B;
    const type = b.problemType ?? '';
    const expected = problemFor(MISMATCH);
    return {
      ok: outcomeOf(b) === MISMATCH && n === 1,
      key: 'l5.reuse.verdict',
      params: { n, status: b.status, type, expectStatus: expected.status, expectType: expected.type },
    };
  },
});

const lesson5NewKey = experiment({
  id: 'l5-newkey',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l5newkey' },
  steps: [
    { label: 'l5.newkey.step1', tag: 'A', title: 'title.key1', key: 'fresh', faults: [LOSE_RESPONSE] },
    { label: 'l5.newkey.step2', tag: 'B', title: 'title.key2', key: 'fresh', harm: 'duplicate' },
  ],
  tone: 'bad',
  verdict(ctx) {
    const n = ctx.newCharges().length;
    return { ok: n === 2, key: 'l5.newkey.verdict', params: { n } };
  },
});


// ---- lesson 2: a change needs a key, a whole new value does not ---------------------------------
//
// Each experiment makes a charge of L2_AMOUNT for itself (step 1), then sends
// one request three times, the first two of whose answers are lost, as a
// client that retries until it hears back would. The track above the diagram
// is what the database holds for that charge after each step.

const L2_AMOUNT = 500;
const L2_REFUND = 100;

/**
 * Step 1 of a lesson 2 experiment: the charge it works on. `keyed`: with a
 * key of its own; the experiment "without a key" sends none at all.
 */
function l2ChargeStepWith({ keyed }) {
  return {
    label: L('l2.step.charge', { amount: () => fmtAmount(L2_AMOUNT, 'jpy') }),
    run: async (ctx) => {
      const rec = await sendCharge(ctx, { tag: 'A', title: 'title.l2charge', key: keyed ? 'fresh' : undefined });
      ctx.vars.chargeId = outcomeOf(rec) === EXECUTED ? rec.json?.id ?? null : null;
      if (!ctx.vars.chargeId) throw new Error(t('l2.noCharge', { status: rec.status ?? rec.error }));
      ctx.vars.track = [chargeOf(ctx)];
    },
  };
}
const l2ChargeStep = l2ChargeStepWith({ keyed: true });

/** The lesson's charge as the database has it now. */
function chargeOf(ctx) {
  return ctx.latest?.charges.find((c) => c.id === ctx.vars.chargeId) ?? null;
}

/** This lesson's refunds in the database now. */
function refundsOf(ctx) {
  return (ctx.latest?.refunds ?? []).filter((r) => r.charge_id === ctx.vars.chargeId);
}

/**
 * One refund request, drawn from what the database holds after it: `made`
 * is whether it gained a refund. A lost answer hides what the server did,
 * so a keyed retry whose answer was lost is drawn as the replay it was.
 */
function narrateRefund(d, rec, bar, { made }) {
  const tag = bar.tag;
  const outcome = outcomeOf(rec);
  const amount = amountOf(rec.spec);
  const key = rec.spec.intent.key ? shortKeyOf(rec.spec.intent.key) : null;
  const replayed = outcome === REPLAYED || (outcome === LOST && key && !made);
  if (replayed) {
    d.message('api', 'db', L('d.readKey', { key }), { tag });
    d.message('db', 'api', L('d.readStored'), { tag, kind: 'reply' });
  } else if (outcome === EXECUTED || outcome === LOST) {
    if (key) d.message('api', 'db', L('d.insertKeyNew', { key }), { tag });
    d.message('api', 'db', L(key ? 'd.refundAndSave' : 'd.insertRefund', { amount }), { tag });
  }
  if (replayed && outcome === LOST) {
    d.message('api', 'client', L('d.lostReplay'), { tag, kind: 'lost', detail: [() => `${rec.status} ${rec.statusText} · ${fmtMs(rec.elapsedMs)} ms`] });
    d.closeBar(bar);
  } else {
    reply(d, rec, bar);
  }
}

/** One refund of L2_REFUND; `keyed`: with the run's key. The first two answers are lost. */
function l2RefundStep(n, keyed) {
  const tag = ['B', 'C', 'D'][n - 1];
  const lost = n < 3;
  return {
    label: L(`l2.step.refund${keyed ? 'Key' : ''}${lost ? 'Lost' : ''}`, { amount: () => fmtAmount(L2_REFUND, 'jpy'), n }),
    run: async (ctx) => {
      const spec = refund({ chargeId: ctx.vars.chargeId, amount: L2_REFUND, key: keyed ? ctx.vars.key : undefined, faults: lost ? [LOSE_RESPONSE] : [] });
      const before = refundsOf(ctx).length;
      // Drawn once the tables have been read after it (see narrateRefund).
      const { record, bar, done } = ctx.start(spec, {
        tag,
        title: T(n === 1 ? 'title.refund' : 'title.refundAgain', { amount: amountOf(spec), n }),
        harm: !keyed && n > 1 ? 'refundAgain' : null,
      });
      await done;
      narrateRefund(ctx.diagram, record, bar, { made: refundsOf(ctx).length > before });
      ctx.vars.track.push(chargeOf(ctx));
    },
  };
}

/** What is left to refund of the lesson's charge, after each step so far. */
function refundTrack(ctx) {
  return {
    label: L('l2.track.refundable'),
    values: (ctx.vars.track ?? []).map((c) => (c ? fmtAmount(c.amount - (c.amount_refunded ?? 0), c.currency) : '—')),
  };
}

const lesson2NoKey = experiment({
  id: 'l2-nokey',
  body: { amount: L2_AMOUNT, currency: 'jpy', desc: 'body.l2nokey' },
  refunds: true,
  tone: 'bad',
  steps: [l2ChargeStepWith({ keyed: false }), l2RefundStep(1, false), l2RefundStep(2, false), l2RefundStep(3, false)],
  track: refundTrack,
  countNote: (ctx) => L('d.countRefunds', { n: refundsOf(ctx).length }),
  verdict(ctx) {
    const refunds = refundsOf(ctx);
    const refunded = chargeOf(ctx)?.amount_refunded ?? null;
    const ok = refunds.length === 3 && refunded === 3 * L2_REFUND;
    return { ok, key: 'l2.nokey.verdict', params: { n: refunds.length, refunded: () => fmtAmount(refunded ?? 0, 'jpy'), left: () => fmtAmount(L2_AMOUNT - (refunded ?? 0), 'jpy') } };
  },
});

const lesson2Key = experiment({
  id: 'l2-key',
  body: { amount: L2_AMOUNT, currency: 'jpy', desc: 'body.l2key' },
  refunds: true,
  steps: [l2ChargeStep, l2RefundStep(1, true), l2RefundStep(2, true), l2RefundStep(3, true)],
  track: refundTrack,
  countNote: (ctx) => L('d.countRefunds', { n: refundsOf(ctx).length }),
  verdict(ctx) {
    const refunds = refundsOf(ctx);
    const refunded = chargeOf(ctx)?.amount_refunded ?? null;
    const d = ctx.records.D;
    const same = refunds.length === 1 && d?.json?.id === refunds[0].id;
    const ok = refunds.length === 1 && refunded === L2_REFUND && outcomeOf(d) === REPLAYED && same;
    return { ok, key: 'l2.key.verdict', params: { n: refunds.length, refunded: () => fmtAmount(refunded ?? 0, 'jpy'), replayed: d?.replayed ?? false, same } };
  },
});

function narrateDescribe(d, rec, bar) {
  const outcome = outcomeOf(rec);
  if (outcome === EXECUTED || outcome === LOST) {
    d.message('api', 'db', L('d.setDescription', { text: rec.spec.intent.description }), { tag: bar.tag });
  }
  reply(d, rec, bar);
}

/** One PUT of the whole new description; the first two answers are lost. */
function l2PutStep(n) {
  const tag = ['B', 'C', 'D'][n - 1];
  const lost = n < 3;
  return {
    label: L(lost ? 'l2.step.putLost' : 'l2.step.put', { n }),
    run: async (ctx) => {
      const spec = describeRequest({ apiKey: server().account.api_key, chargeId: ctx.vars.chargeId, description: ctx.vars.newDescription, faults: lost ? [LOSE_RESPONSE] : [] });
      await ctx.send(spec, { tag, title: T(n === 1 ? 'title.put' : 'title.putAgain', { n }), narrate: narrateDescribe });
      ctx.vars.track.push(chargeOf(ctx));
    },
  };
}

const lesson2Put = experiment({
  id: 'l2-put',
  body: { amount: L2_AMOUNT, currency: 'jpy', desc: 'body.l2put' },
  setup(ctx) {
    // Chosen once per run, in the language of the moment, and sent as is three times.
    ctx.vars.newDescription = null;
  },
  steps: [
    {
      ...l2ChargeStep,
      run: async (ctx) => {
        await l2ChargeStep.run(ctx);
        ctx.vars.newDescription = t('body.l2putNew');
      },
    },
    l2PutStep(1),
    l2PutStep(2),
    l2PutStep(3),
  ],
  track: (ctx) => ({ label: L('l2.track.description'), values: (ctx.vars.track ?? []).map((c) => c?.description ?? '—') }),
  countNote: (ctx) => L('d.countDescription', { n: ctx.newCharges().length, text: chargeOf(ctx)?.description ?? '—' }),
  verdict(ctx) {
    const charge = chargeOf(ctx);
    const after = (ctx.vars.track ?? []).slice(1).map((c) => c?.description);
    const same = after.length === 3 && after.every((v) => v === ctx.vars.newDescription);
    const ok = ctx.newCharges().length === 1 && charge?.description === ctx.vars.newDescription && same && ctx.records.D?.status === 200;
    return { ok, key: 'l2.put.verdict', params: { n: ctx.newCharges().length, description: charge?.description ?? '—', same, status: ctx.records.D?.status ?? '—' } };
  },
});

// ---- lesson 6: what a key cannot promise -----------------------------------------------------

const FORGET_COMMIT = 'forget-commit';

/** (a) The database acknowledges a commit, then loses it, as an asynchronous standby's promotion does. */
const lesson6Forget = experiment({
  id: 'l6-forget',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l6forget' },
  tone: 'bad',
  steps: [
    {
      label: 'l6.forget.step1',
      run: async (ctx) => {
        const rec = await sendCharge(ctx, {
          tag: 'A', title: 'title.forgotten', key: 'same', faults: [FORGET_COMMIT], harm: 'forgotten',
          narrate: (d, r, bar) => {
            if (outcomeOf(r) === EXECUTED) {
              d.message('api', 'db', L('d.insertKeyNew', { key: shortKeyOf(ctx.vars.key) }), { tag: 'A' });
              d.message('api', 'db', L('d.chargeAndSave', { amount: amountOf(r.spec) }), { tag: 'A' });
            }
            reply(d, r, bar);
            if (outcomeOf(r) === EXECUTED) d.note(['db'], L('d.forgotten', { id: shortKeyOf(r.json?.id ?? '') }), { tag: 'A' });
          },
        });
        ctx.vars.heldId = rec.json?.id ?? null;
      },
    },
    { label: 'l6.forget.step2', tag: 'B', title: 'title.retrySameKey', key: 'same', harm: 'newId' },
    {
      label: 'l6.forget.step3',
      run: (ctx) => ctx.send(lookupRequest({ apiKey: server().account.api_key, chargeId: ctx.vars.heldId ?? 'none' }), {
        tag: 'C',
        title: T('title.lookupHeld'),
        narrate: (d, rec, bar) => {
          d.message('api', 'db', L('d.selectCharge', { id: shortKeyOf(ctx.vars.heldId ?? '') }), { tag: 'C' });
          d.message('db', 'api', L(rec.status === 200 ? 'd.found' : 'd.noSuchCharge'), { tag: 'C', kind: 'reply' });
          reply(d, rec, bar);
        },
      }),
    },
  ],
  verdict(ctx) {
    const { A, B, C } = ctx.records;
    const held = ctx.vars.heldId;
    const fresh = ctx.newCharges();
    const ids = fresh.map((c) => c.id);
    const y = B?.json?.id ?? null;
    const ok = A?.status === 201 && Boolean(held) && !ids.includes(held) && outcomeOf(B) === EXECUTED && !B.replayed
      && y !== held && ids.length === 1 && ids[0] === y && C?.status === 404;
    return { ok, key: 'l6.forget.verdict', params: { x: (held ?? '—').slice(0, 8), y: (y ?? '—').slice(0, 8), n: fresh.length, lookup: C?.status ?? '—' } };
  },
});

/** Key-first's lease in lesson 6 (b): long enough for the retry to meet it, short enough to wait out. */
const L6_LEASE_MS = 5000;
/** The retry B is sent this long after A's answer. */
const L6_RETRY_AFTER_MS = 300;

/** (b) A key-first request stops after committing its key (no charge, key not released). */
const lesson6Abandon = experiment({
  id: 'l6-abandon',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l6abandon' },
  steps: [
    {
      label: L('l6.abandon.step1', { s: L6_LEASE_MS / 1000 }),
      run: async (ctx) => {
        const mode = 'key-first';
        const key = ctx.vars.key;
        await ctx.send(charge({ ...ctx.vars.body, key, mode, faults: ['abandon', `lease=${L6_LEASE_MS}`] }), {
          tag: 'A',
          title: T('title.abandoned', { s: L6_LEASE_MS / 1000 }),
          narrate: (dd, rec, bar) => {
            if (outcomeOf(rec) === LOST) {
              dd.message('api', 'db', L('d.kfRegister', { key: shortKeyOf(key), s: L6_LEASE_MS / 1000 }), { tag: 'A' });
              dd.note(['api'], L('d.abandoned'), { tag: 'A' });
            }
            reply(dd, rec, bar);
          },
        });
        ctx.vars.rowAfterA = ctx.latest?.idempotency_keys.find((k) => k.key === key) ?? null;
        await ctx.sleep(L6_RETRY_AFTER_MS);
        await ctx.send(charge({ ...ctx.vars.body, key, mode }), {
          tag: 'B',
          title: T('title.retryAtOnce'),
          narrate: (dd, rec, bar) => narrateCharge(dd, rec, bar, { holder: 'A' }),
        });
      },
    },
    {
      label: 'l6.abandon.step2',
      run: async (ctx) => {
        const key = ctx.vars.key;
        // The tables as they are now, not as they were after B: the lease may be over already.
        const now = await ctx.refresh();
        // How long the lease still runs, by the server's clock (GET /demo/state's now);
        // never longer than the lease A asked for.
        const left = leaseLeft(now, key);
        ctx.vars.waitedMs = Math.min(L6_LEASE_MS, Math.max(0, Math.round(left ?? 0))) + 400;
        ctx.diagram.note(['client'], L('d.waitLease', { span: () => fmtSpan(ctx.vars.waitedMs) }), { tag: 'C' });
        // While it waits, the page reads the tables again and again, so the
        // lease is seen counting down by the database's clock.
        await waitWatchingLease(ctx, key, ctx.vars.waitedMs);
        await ctx.send(charge({ ...ctx.vars.body, key, mode: 'key-first' }), {
          tag: 'C',
          title: T('title.afterLease'),
          narrate: (d, rec, bar) => {
            if (outcomeOf(rec) === EXECUTED) {
              d.message('api', 'db', L('d.takeOver', { key: shortKeyOf(key) }), { tag: 'C' });
              d.message('api', 'db', L('d.kfCommitPlain'), { tag: 'C' });
            } else if (outcomeOf(rec) === REPLAYED) {
              // The server's recovery task came first: it took the row over after the lease and charged.
              d.note(['api'], L('d.recoveredFirst', { key: shortKeyOf(key) }), { tag: 'C' });
              d.message('api', 'db', L('d.readKey', { key: shortKeyOf(key) }), { tag: 'C' });
              d.message('db', 'api', L('d.readStored'), { tag: 'C', kind: 'reply' });
            }
            reply(d, rec, bar);
          },
        });
      },
    },
  ],
  verdict(ctx) {
    const { A, B, C } = ctx.records;
    const row = ctx.vars.rowAfterA;
    const fresh = ctx.newCharges();
    const keyRow = ctx.latest?.idempotency_keys.find((k) => k.key === ctx.vars.key);
    // After the lease, either C takes the row over and charges, or the
    // server's recovery task (lesson 7) has already done so and C replays it:
    // one charge either way.
    const recovered = outcomeOf(C) === REPLAYED;
    const ok = outcomeOf(A) === LOST && row?.status === 'in_progress' && outcomeOf(B) === IN_FLIGHT && [EXECUTED, REPLAYED].includes(outcomeOf(C))
      && fresh.length === 1 && fresh[0].id === C.json?.id && keyRow?.status === 'completed' && keyRow.charge_id === C.json?.id;
    return {
      ok,
      key: 'l6.abandon.verdict',
      params: { a: A?.status ?? '—', row: row?.status ?? '—', b: B?.status ?? '—', c: C?.status ?? '—', n: fresh.length, waited: () => fmtSpan(ctx.vars.waitedMs ?? 0), recovered },
    };
  },
});

/** How long the lease of `key`'s in-progress row still runs in `state`, by the server's clock; null without one. */
function leaseLeft(state, key) {
  const row = state?.idempotency_keys.find((k) => k.key === key);
  return row?.status === 'in_progress' && row.locked_until ? timeOf(row.locked_until) - nowOf(state) : null;
}

/** How often the page reads the tables while it waits for a lease. */
const LEASE_POLL_MS = 300;

/** Shows how the wait for `key`'s lease is going, from `state` (the latest read). */
function showLease(ctx, state, key, started) {
  const left = leaseLeft(state, key);
  if (left === null) return;
  const waited = performance.now() - started;
  ctx.progress(L('progress.lease', { ms: left, span: () => fmtSpan(Math.abs(left)), waited: () => fmtSpan(waited) }), left);
}

/** Waits `ms`, reading the tables every LEASE_POLL_MS and showing the lease of `key` counting down. */
async function waitWatchingLease(ctx, key, ms) {
  const started = performance.now();
  showLease(ctx, ctx.latest, key, started);
  for (;;) {
    const rest = ms - (performance.now() - started);
    if (rest <= 0) return;
    await ctx.sleep(Math.min(LEASE_POLL_MS, rest));
    showLease(ctx, await ctx.refresh(), key, started);
  }
}

/** (c) The retention ends while the client is still retrying. */
const lesson6Retention = experiment({
  id: 'l6-retention',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l6retention' },
  tone: 'bad',
  steps: [
    { label: 'l6.retention.step1', tag: 'A', title: 'title.first', key: 'same', faults: [LOSE_RESPONSE] },
    {
      label: 'l6.retention.step2',
      run: (ctx) => ctx.send(expireRequest(ctx.vars.key), { tag: 'B', title: T('title.retentionOver'), narrate: narrateExpire }),
    },
    { label: 'l6.retention.step3', tag: 'C', title: 'title.lateRetry', key: 'same', harm: sameKeyDuplicate, keyWas: () => 'expired' },
  ],
  verdict(ctx) {
    const n = ctx.newCharges().length;
    const c = ctx.records.C;
    return { ok: n === 2 && outcomeOf(c) === EXECUTED && !c.replayed, key: 'l6.retention.verdict', params: { n, status: c?.status ?? '—', sameAuth: sameAuthorization(ctx) } };
  },
});

// ---- lesson 7: the charge reaches the card network --------------------------------------------
//
// Every charge is first authorized at the card network, a service of its own
// with its own database, under an Idempotency-Key the server derives from
// the client's (the same account and key always give the same one). The
// experiments draw a fourth lane for it and show both ledgers after each
// step: our charges, with the authorization each holds, and the network's
// authorizations of this run (GET /demo/state's `network`).

const NETWORK_LANES = ['client', 'api', 'db', 'network'];

/** Key-first's lease in lesson 7 (c): long enough for B to meet it, short enough to wait out. */
const L7_LEASE_MS = 2000;
/** B is sent this long after A's answer. */
const L7_RETRY_AFTER_MS = 300;
/** While waiting for the recovery task, the page reads the tables this often. */
const L7_POLL_MS = 300;
/** How much longer than the lease and one recovery interval the page waits before it gives up. */
const L7_RECOVERY_SLACK_MS = 5000;

/** The lesson's experiments need a server with a card network (GET /demo/config's `network`). */
function withoutNetwork() {
  const config = serverOrNull();
  return config && !config.network ? t('l7.noNetwork') : null;
}

/** A lesson 7 experiment: four lanes, both ledgers, and off on a server without a network. */
function networkExperiment(def) {
  return experiment({ lanes: NETWORK_LANES, network: true, unavailable: withoutNetwork, ...def });
}

/** The authorization ids the network's ledger holds in `state`. */
function authIdsOf(state) {
  return new Set((state?.network?.authorizations ?? []).map((a) => a.id));
}

/** Our charges, the network's authorizations (this run's) and the key row, as they are now. */
function ledgersOf(ctx) {
  return {
    charges: ctx.newCharges().length,
    auths: ctx.newAuthorizations().length,
    key: ctx.latest?.idempotency_keys.find((k) => k.key === ctx.vars.key) ?? null,
  };
}

/** The network's key for a request: derived from the client's, or (network-fresh-key) a new one each time. */
function networkKeyLine(intent) {
  const fresh = intent.faults?.includes('network-fresh-key');
  return L(fresh ? 'd.netKeyFresh' : 'd.netKeyDerived', { key: shortKeyOf(intent.key ?? '') });
}

// A charge that calls the card network runs in three phases: the design
// this lesson teaches (the diagrams draw it from these definitions).
//  1. one short transaction: register the key in_progress under its lease,
//     with the request; COMMIT; the connection goes back to the pool;
//  2. the call to the network under the derived key, holding no database
//     connection and no transaction;
//  3. one transaction: the charge with its authorization id, and the 201
//     under the key only if the lease is still ours; COMMIT.
// A foreign call never runs inside a transaction: the connection would sit
// idle in it while the network thinks, and every other request queue behind.

/** Phase 1, drawn: the key committed in progress, the connection handed back. */
function drawPhase1(d, tag, key) {
  d.message('api', 'db', L('d.phase1', { key }), { tag });
  d.note(['db'], L('d.poolBack'), { tag });
}

/** Phase 2, drawn: the call to the network, with no connection held. */
function drawPhase2(d, tag, intent, kind = 'call') {
  d.message('api', 'network', L('d.callAuthorize'), { tag, kind, detail: [L('d.phase2'), networkKeyLine(intent)] });
}

/**
 * What the server did with one POST /charges that goes through the card
 * network, drawn once its answer is in. `known`: the authorization ids the
 * network held before the request was sent (an id among them is the
 * network's replay, not a new authorization).
 */
function narrateNetworkCharge(d, rec, bar, { known = new Set(), holder = '…' } = {}) {
  const intent = rec.spec.intent;
  const tag = bar.tag;
  const key = shortKeyOf(intent.key ?? '');
  const faults = intent.faults ?? [];
  const amount = amountOf(rec.spec);
  const outcome = outcomeOf(rec);
  const toDb = (text) => d.message('api', 'db', text, { tag });
  const fromDb = (text) => d.message('db', 'api', text, { tag, kind: 'reply' });
  if (outcome === REPLAYED) {
    // Our key row answers: the network is not asked again.
    toDb(L('d.readKey', { key }));
    fromDb(L('d.readStoredNoNetwork'));
  } else if (outcome === IN_FLIGHT) {
    toDb(L('d.kfRegisterB', { key }));
    fromDb(L('d.kfInProgress', { other: holder }));
  } else if (outcome === EXECUTED) {
    const auth = rec.json?.authorization_id ?? '';
    drawPhase1(d, tag, key);
    drawPhase2(d, tag, intent);
    d.message('network', 'api', L(known.has(auth) ? 'd.netReplayed' : 'd.netAuthorized', { id: shortKeyOf(auth) }), { tag, kind: 'reply' });
    toDb(L('d.phase3', { amount, id: shortKeyOf(auth) }));
  } else if (outcome === UNAVAILABLE) {
    drawPhase1(d, tag, key);
    if (faults.includes('network-down')) {
      drawPhase2(d, tag, intent, 'lost');
      d.note(['network'], L('d.netDown'), { tag });
    } else {
      drawPhase2(d, tag, intent);
      d.note(['network'], L('d.netAuthorizes'), { tag });
      d.message('network', 'api', L('d.netAnswerLost'), { tag, kind: 'lost' });
    }
    toDb(L('d.phase3Release'));
  } else if (outcome === LOST && faults.includes('abandon-after-network')) {
    drawPhase1(d, tag, key);
    drawPhase2(d, tag, intent);
    d.message('network', 'api', L('d.netAuthorizedNew'), { tag, kind: 'reply' });
    d.note(['api'], L('d.abandonedAfterNetwork'), { tag });
  }
  reply(d, rec, bar);
}

/** A charge with the run's key, through the network, narrated with the network's lane. */
function sendNetworkCharge(ctx, { tag, title, faults = [], mode, harm = null, holder }) {
  const known = authIdsOf(ctx.latest);
  const spec = charge({ ...ctx.vars.body, key: ctx.vars.key, faults, mode });
  return ctx.send(spec, {
    tag,
    title: T(title, { s: L7_LEASE_MS / 1000 }),
    harm,
    narrate: (d, rec, bar) => narrateNetworkCharge(d, rec, bar, { known, holder }),
  });
}

/** The first attempt of (a), (b) and (d): one charge with a fault at the network; both ledgers after it. */
function l7FirstStep(label, faults) {
  return {
    label,
    run: async (ctx) => {
      await sendNetworkCharge(ctx, { tag: 'A', title: 'title.first', faults });
      ctx.vars.afterA = ledgersOf(ctx);
    },
  };
}

/** The retry of (a), (b) and (d), with the same key. */
function l7RetryStep(label, { faults = [], harm = null } = {}) {
  return { label, run: (ctx) => sendNetworkCharge(ctx, { tag: 'B', title: 'title.retrySameKey', faults, harm }) };
}

/** The charge the retry B made, and the authorizations of the run that no charge of ours holds. */
function l7Outcome(ctx) {
  const charges = ctx.newCharges();
  const auths = ctx.newAuthorizations();
  const held = new Set((ctx.latest?.charges ?? []).map((c) => c.authorization_id).filter(Boolean));
  const b = ctx.records.B;
  const charged = charges.find((c) => c.id === b?.json?.id) ?? null;
  return {
    charges,
    auths,
    orphans: auths.filter((a) => !held.has(a.id)),
    authId: b?.json?.authorization_id ?? null,
    charged,
  };
}

/** (a) The network authorized, its answer was lost; our retry with the same key is the network's replay. */
const lesson7Lost = networkExperiment({
  id: 'l7-lost',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l7lost' },
  steps: [l7FirstStep('l7.lost.step1', ['network-lose-answer']), l7RetryStep('l7.lost.step2')],
  verdict(ctx) {
    const { A, B } = ctx.records;
    const afterA = ctx.vars.afterA ?? {};
    const { charges, auths, authId, charged } = l7Outcome(ctx);
    const same = Boolean(authId) && auths.length === 1 && auths[0].id === authId && charged?.authorization_id === authId;
    const ok = outcomeOf(A) === UNAVAILABLE && afterA.charges === 0 && afterA.auths === 1 && !afterA.key
      && outcomeOf(B) === EXECUTED && charges.length === 1 && same;
    return {
      ok,
      key: 'l7.lost.verdict',
      params: { a: A?.status ?? '—', b: B?.status ?? '—', n: charges.length, auths: auths.length, id: (authId ?? '—').slice(0, 8), same, authsA: afterA.auths ?? '—' },
    };
  },
});

/** (b) The same, but the key is not passed on: a new network key each time. */
const lesson7Fresh = networkExperiment({
  id: 'l7-fresh',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l7fresh' },
  tone: 'bad',
  steps: [
    l7FirstStep('l7.fresh.step1', ['network-fresh-key', 'network-lose-answer']),
    l7RetryStep('l7.fresh.step2', { faults: ['network-fresh-key'], harm: 'orphan' }),
  ],
  verdict(ctx) {
    const { A, B } = ctx.records;
    const { charges, auths, orphans, authId, charged } = l7Outcome(ctx);
    const ok = outcomeOf(A) === UNAVAILABLE && outcomeOf(B) === EXECUTED && charges.length === 1 && auths.length === 2
      && orphans.length === 1 && charged?.authorization_id === authId && orphans[0].id !== authId;
    return {
      ok,
      key: 'l7.fresh.verdict',
      params: { n: charges.length, auths: auths.length, orphans: orphans.length, orphan: (orphans[0]?.id ?? '—').slice(0, 8), amount: () => fmtAmount(1000, 'jpy') },
    };
  },
});

/** (c) Key-first, abandoned after the network authorized; the server's recovery task finishes it. */
const lesson7Recover = networkExperiment({
  id: 'l7-recover',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l7recover' },
  steps: [
    {
      label: L('l7.recover.step1', { s: L7_LEASE_MS / 1000 }),
      run: async (ctx) => {
        const mode = 'key-first';
        await sendNetworkCharge(ctx, { tag: 'A', title: 'title.abandonedAfterNetwork', mode, faults: ['abandon-after-network', `lease=${L7_LEASE_MS}`] });
        ctx.vars.afterA = ledgersOf(ctx);
        ctx.vars.authsAfterA = authIdsOf(ctx.latest);
        await ctx.sleep(L7_RETRY_AFTER_MS);
        await sendNetworkCharge(ctx, { tag: 'B', title: 'title.retryAtOnce', mode, holder: 'A' });
        ctx.vars.afterB = ledgersOf(ctx);
      },
    },
    { label: 'l7.recover.step2', run: (ctx) => waitForRecovery(ctx) },
    {
      label: 'l7.recover.step3',
      run: (ctx) => sendNetworkCharge(ctx, { tag: 'C', title: 'title.afterRecovery', mode: 'key-first' }),
    },
  ],
  verdict(ctx) {
    const { A, B, C } = ctx.records;
    const afterA = ctx.vars.afterA ?? {};
    const recovered = ctx.vars.recovered ?? {};
    const charges = ctx.newCharges();
    const auths = ctx.newAuthorizations();
    const charged = charges[0] ?? null;
    const same = charges.length === 1 && auths.length === 1 && charged.authorization_id === auths[0].id;
    const ok = outcomeOf(A) === LOST && afterA.key?.status === 'in_progress' && afterA.charges === 0 && afterA.auths === 1
      && outcomeOf(B) === IN_FLIGHT && recovered.ok === true && outcomeOf(C) === REPLAYED && C.json?.id === charged?.id
      && C.json?.id === recovered.chargeId && same;
    return {
      ok,
      key: 'l7.recover.verdict',
      params: {
        a: A?.status ?? '—',
        row: afterA.key?.status ?? '—',
        b: B?.status ?? '—',
        c: C?.status ?? '—',
        replayed: C?.replayed ?? false,
        recovered: recovered.ok === true,
        waited: () => fmtSpan(recovered.waitedMs ?? 0),
        n: charges.length,
        auths: auths.length,
        id: (auths[0]?.id ?? '—').slice(0, 8),
        same,
      },
    };
  },
});

/**
 * (c), step 2: the client waits while the lease runs out and the server's
 * recovery task (every recovery_interval_ms) takes the key over and
 * finishes A. The page reads the tables every L7_POLL_MS until the key row
 * is completed, or gives up after the lease, one interval and some slack.
 */
async function waitForRecovery(ctx) {
  const d = ctx.diagram;
  const key = ctx.vars.key;
  const short = shortKeyOf(key);
  const interval = server().recovery_interval_ms;
  const rowOf = (state) => state?.idempotency_keys.find((k) => k.key === key) ?? null;
  const started = performance.now();
  // The tables as they are now (the lease may be over, the key finished, already).
  let state = await ctx.refresh();
  const row = rowOf(state);
  // How long the lease still runs, by the server's clock; never longer than the lease A asked for.
  const left = row?.status === 'in_progress' && row.locked_until ? Math.max(0, timeOf(row.locked_until) - nowOf(state)) : 0;
  const limit = Math.min(L7_LEASE_MS, left) + interval + L7_RECOVERY_SLACK_MS;
  d.note(['client'], L('d.waitRecovery', { every: () => fmtSpan(L7_POLL_MS) }));
  showLease(ctx, state, key, started);
  while (rowOf(state)?.status !== 'completed' && performance.now() - started < limit) {
    await ctx.sleep(L7_POLL_MS);
    state = await ctx.refresh();
    showLease(ctx, state, key, started);
  }
  const waitedMs = Math.round(performance.now() - started);
  const done = rowOf(state);
  const charged = done?.status === 'completed' ? ctx.newCharges().find((c) => c.id === done.charge_id) ?? null : null;
  ctx.vars.recovered = { ok: Boolean(charged), chargeId: charged?.id ?? null, waitedMs };
  if (!charged) {
    d.note(['api'], L('d.notRecovered', { span: () => fmtSpan(waitedMs) }));
    return;
  }
  // What the tables show the recovery task did: the key completed, a charge holding the authorization A got.
  const auth = charged.authorization_id ?? '';
  d.note(['api'], L('d.recoveryTakesOver', { key: short, span: () => fmtSpan(waitedMs), every: () => fmtSpan(interval) }));
  d.message('api', 'network', L('d.callAuthorize'), { detail: [L('d.phase2'), L('d.netKeyDerived', { key: short })] });
  d.message('network', 'api', L(ctx.vars.authsAfterA?.has(auth) ? 'd.netReplayed' : 'd.netAuthorized', { id: shortKeyOf(auth) }), { kind: 'reply' });
  d.message('api', 'db', L('d.phase3', { amount: () => fmtAmount(charged.amount, charged.currency), id: shortKeyOf(auth) }));
}

/** (d) The network is down: 503 with Retry-After, nothing stored anywhere, the key free; the retry charges. */
const lesson7Down = networkExperiment({
  id: 'l7-down',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l7down' },
  steps: [l7FirstStep('l7.down.step1', ['network-down']), l7RetryStep('l7.down.step2')],
  verdict(ctx) {
    const { A, B } = ctx.records;
    const afterA = ctx.vars.afterA ?? {};
    const { charges, auths, authId, charged } = l7Outcome(ctx);
    const retryAfter = A?.header('Retry-After') ?? null;
    const ok = outcomeOf(A) === UNAVAILABLE && retryAfter !== null && afterA.charges === 0 && afterA.auths === 0 && !afterA.key
      && outcomeOf(B) === EXECUTED && charges.length === 1 && auths.length === 1 && auths[0].id === authId && charged?.authorization_id === authId;
    return {
      ok,
      key: 'l7.down.verdict',
      params: { a: A?.status ?? '—', retryAfter: retryAfter ?? '—', b: B?.status ?? '—', n: charges.length, auths: auths.length, authsA: afterA.auths ?? '—' },
    };
  },
});

/** Every experiment, by the id of its placeholder in index.html (data-experiment). */
export const EXPERIMENTS = {
  l1: lesson1,
  'l2-nokey': lesson2NoKey,
  'l2-key': lesson2Key,
  'l2-put': lesson2Put,
  'l3-retry': lesson3Retry,
  'l3-naive': lesson3Naive,
  'l3-guarded': lesson3Guarded,
  l4: lesson4,
  'l5-expire': lesson5Expire,
  'l5-reuse': lesson5Reuse,
  'l5-newkey': lesson5NewKey,
  'l6-forget': lesson6Forget,
  'l6-abandon': lesson6Abandon,
  'l6-retention': lesson6Retention,
  'l7-lost': lesson7Lost,
  'l7-fresh': lesson7Fresh,
  'l7-recover': lesson7Recover,
  'l7-down': lesson7Down,
};

export function mountExperiments(root) {
  for (const host of root.querySelectorAll('[data-experiment]')) {
    const def = EXPERIMENTS[host.dataset.experiment];
    if (!def) continue;
    const experiment = new Experiment(host, def);
    if (def === lesson4) mountLesson4Modes(root, experiment);
  }
}

/** Sets text only when it changed, so a live region does not repeat itself. */
function setText(el, text) {
  if (el && el.textContent !== text) el.textContent = text;
}

function setHtml(el, html) {
  if (el && el.dataset.html !== html) {
    el.innerHTML = html;
    el.dataset.html = html;
  }
}

/** Lesson 4's mode-dependent text, and the sentences that quote the server's settings. */
function renderLesson4(root) {
  const config = serverOrNull();
  setHtml(root.querySelector('[data-role="l4-intro"]'), tHtml('l4.p1.html', HOLD));
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

/**
 * The sentences of lessons 3 to 5 that quote the server's own settings (GET
 * /demo/config), or lesson 4's timing; '…' until the settings have been read.
 */
export function renderServerFacts(root) {
  const config = serverOrNull();
  setHtml(root.querySelector('[data-role="l3-race"]'), tHtml('l3.race.p1.html', { pause: config?.check_then_insert_pause_ms ?? '…' }));
  renderLesson4(root);
  const ttl = config ? fmtDuration(config.idempotency_ttl_seconds) : '…';
  setText(root.querySelector('[data-role="l5-ttl"]'), t('l5.p1', { ttl }));
  setHtml(root.querySelector('[data-role="l5-purge"]'), tHtml('l5.purge.p1.html', {
    batch: config ? fmtInt(config.purge_batch) : '…',
    every: config ? fmtDuration(config.purge_interval_seconds) : '…',
    defaultEvery: config ? fmtDuration(config.default_purge_interval_seconds) : '…',
  }));
  setText(root.querySelector('[data-role="l5-retention"]'), t('l5.purge.p2', { ttl }));
  setHtml(root.querySelector('[data-role="l6-abandon-intro"]'), tHtml('l6.abandon.p1.html', {
    s: L6_LEASE_MS / 1000,
    ms: L6_LEASE_MS,
    lease: config ? fmtDuration(config.idempotency_lease_seconds) : '…',
  }));
  setText(root.querySelector('[data-role="l6-retention-intro"]'), t('l6.retention.p1', { ttl }));
  renderLesson7(root, config);
}

/** Lesson 7's sentences that quote the server: its network (or that it has none), the recovery task's interval. */
function renderLesson7(root, config) {
  const network = config ? config.network : undefined;
  setHtml(root.querySelector('[data-role="l7-network"]'), network === null
    ? tHtml('l7.network.none.html')
    : tHtml('l7.network.html', { url: network ?? '…' }));
  const every = config ? fmtSpan(config.recovery_interval_ms) : '…';
  setHtml(root.querySelector('[data-role="l7-recover-intro"]'), tHtml('l7.recover.p1.html', {
    s: L7_LEASE_MS / 1000,
    ms: L7_LEASE_MS,
    every,
  }));
}
