// The lessons: what each experiment sends, and how the diagram tells what
// the server did with it.
//
// The server's inner steps (which rows it inserted, what it waited for) are
// not visible from the page. The diagram draws them from what the server is
// known to do for the request that was sent, and from what came of it
// (outcomeOf: status, problem type, Idempotent-Replayed), never from guesses
// about timing.
//
// This module holds what the lessons share: the requests as the demo
// account, the narration of a charge, an experiment's shape, and a few
// helpers two lessons use. Each lesson is a module of its own
// (lesson1.js … lesson7.js); index.js lists them in order.

import { chargeRequest, refundRequest, newKey, declines } from '../api.js';
import { L } from '../diagram.js';
import { amountOf, shortKeyOf } from '../experiment.js';
import { t, fmtAmount, fmtMs, fmtSpan, msUnit } from '../i18n.js';
import { outcomeOf, EXECUTED, REPLAYED, MISMATCH, IN_FLIGHT, LOST, DECLINED } from '../outcome.js';
import { server } from '../server.js';
import { timeOf, nowOf } from '../tables.js';

/** A POST /charges as the demo account. */
export function charge(fields) {
  return chargeRequest({ apiKey: server().account.api_key, ...fields });
}

/** A POST /charges/{id}/refunds as the demo account. */
export function refund(fields) {
  return refundRequest({ apiKey: server().account.api_key, ...fields });
}

// ---- narration ----------------------------------------------------------------

/** The answer's arrow back to the client; closes the request's bar. */
export function reply(d, rec, bar) {
  const tag = bar.tag;
  const ms = () => fmtMs(rec.elapsedMs);
  const outcome = outcomeOf(rec);
  if (rec.error) {
    d.note(['client', 'api'], L('d.failed', { message: rec.error }), { tag });
  } else if (outcome === LOST) {
    // What was thrown away: the 201 (or a PUT's 200); an abandoned request had no answer at all.
    const faults = rec.spec.intent?.faults ?? [];
    const text = faults.includes('abandon') || faults.includes('abandon-after-network') ? L('d.abandonedReply') : L('d.lost', { status: rec.spec.kind === 'describe' ? 200 : declines(rec.spec.intent) ? 402 : 201 });
    d.message('api', 'client', text, { tag, kind: 'lost', detail: [() => `${rec.status} ${rec.statusText} · ${ms()}${msUnit()}`] });
  } else if (outcome === REPLAYED) {
    d.message('api', 'client', L('d.replyReplayed', { ms, status: rec.status }), { tag, kind: 'reply' });
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
export function narrateCharge(d, rec, bar, { keyWas = null, holder = '…' } = {}) {
  const intent = rec.spec.intent;
  const tag = bar.tag;
  const key = intent.key ? shortKeyOf(intent.key) : null;
  const amount = amountOf(rec.spec);
  const outcome = outcomeOf(rec);
  // A lost answer was charged all the same: the demo throws the answer away
  // after the commit. A decline writes its failed charge (and stores its 402).
  const charged = outcome === EXECUTED || outcome === LOST || outcome === DECLINED;
  const failed = declines(intent);
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
      toDb(L(failed ? 'd.declineAndSave' : 'd.chargeAndSave', { amount }));
    } else {
      toDb(L(failed ? 'd.insertDeclined' : 'd.insertCharge', { amount }));
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

export function narrateExpire(d, rec, bar) {
  if (outcomeOf(rec) === EXECUTED) d.message('api', 'db', L('d.markExpired', { key: shortKeyOf(rec.spec.intent.key) }), { tag: bar.tag });
  reply(d, rec, bar);
}

export function narratePurge(d, rec, bar) {
  if (outcomeOf(rec) === EXECUTED) {
    const n = Number(rec.json?.purged ?? 0);
    d.message('api', 'db', L('d.purgeDelete', { batch: server().purge_batch }), { tag: bar.tag });
    d.message('db', 'api', L('d.purgedRows', { n }), { tag: bar.tag, kind: 'reply' });
  }
  reply(d, rec, bar);
}

// Card titles, as thunks so they follow a language switch.
export const T = L;

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

export const LOSE_RESPONSE = 'lose-response';

/** Runs one charge step as its row describes it. */
export function sendCharge(ctx, step) {
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
export function bodyOf({ desc, ...body }) {
  return desc ? { ...body, description: t(desc) } : body;
}

/** An experiment for experiment.js, its charge steps made runnable. */
export function experiment({ body, steps, setup, ...rest }) {
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

// ---- shared by lessons 5 and 6: a late retry under an old key -------------------------------

/**
 * The harm of a second charge made under the first one's key (its record
 * forgotten): the same purchase charged twice. (Had it asked the card
 * network, the network would have forgotten the derived key by then too,
 * and made a second authorization: lesson 7.)
 */
export function sameKeyDuplicate() {
  return 'duplicate';
}

// ---- shared by lessons 6 and 7: watching a key-first lease run out ---------------------------

/** How long the lease of `key`'s in-progress row still runs in `state`, by the server's clock; null without one. */
export function leaseLeft(state, key) {
  const row = state?.idempotency_keys.find((k) => k.key === key);
  return row?.status === 'in_progress' && row.locked_until ? timeOf(row.locked_until) - nowOf(state) : null;
}

/**
 * Shows how the wait for `key`'s lease is going, from `state` (the latest
 * read). With `recoveryEvery` (ms), the wait is for the recovery task, and
 * once the lease is over it says so, rather than counting the lease on.
 */
export function showLease(ctx, state, key, started, { recoveryEvery = null } = {}) {
  const left = leaseLeft(state, key);
  if (left === null) return;
  const waited = performance.now() - started;
  const params = { ms: left, span: () => fmtSpan(Math.abs(left)), waited: () => fmtSpan(waited) };
  if (recoveryEvery !== null) ctx.progress(L('progress.recovery', { ...params, every: () => fmtSpan(recoveryEvery) }), left);
  else ctx.progress(L('progress.lease', params), left);
}

// ---- the sentences that quote the server's settings ------------------------------------------

/** Sets text only when it changed, so a live region does not repeat itself. */
export function setText(el, text) {
  if (el && el.textContent !== text) el.textContent = text;
}

export function setHtml(el, html) {
  if (el && el.dataset.html !== html) {
    el.innerHTML = html;
    el.dataset.html = html;
  }
}
