// Lesson 5: key lifetime and reuse.

import { expireRequest, purgeRequest } from '../api.js';
import { t, tHtml, fmtInt, fmtDuration } from '../i18n.js';
import { outcomeOf, problemFor, EXECUTED, MISMATCH, REPLAYED, LOST } from '../outcome.js';
import { narrateExpire, narratePurge, T, LOSE_RESPONSE, experiment, sameKeyDuplicate, setText, setHtml } from './shared.js';

export const lesson5Expire = experiment({
  id: 'l5-expire',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l5expire' },
  steps: [
    { label: 'l5.expire.step1', tag: 'A', title: 'title.first', key: 'same', faults: [LOSE_RESPONSE] },
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
      params: { n, status: retry.status, purged: purge.purged ?? '—', keyLeft: purge.keyLeft, kept: purge.kept },
    };
  },
});

export const lesson5Reuse = experiment({
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

export const lesson5NewKey = experiment({
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

/** The card lesson 5's decline is tried with: Stripe's test id for insufficient funds. */
const DECLINING_CARD = 'pm_card_chargeDeclinedInsufficientFunds';
/** The card the customer tries next. */
const ANOTHER_CARD = 'pm_card_visa';

/**
 * A decline is an answer: A's card is declined and its 402 lost; B's
 * retry with the key replays the stored 402 (nothing declined again); C,
 * the same key with another card, is a 422; D, a new key, charges. Every
 * count from this run's rows: one failed charge, one that succeeded.
 */
export const lesson5Decline = experiment({
  id: 'l5-decline',
  body: { amount: 1000, currency: 'jpy', desc: 'body.l5decline', paymentMethod: DECLINING_CARD },
  steps: [
    { label: 'l5.decline.step1', tag: 'A', title: 'title.declinedLost', key: 'same', faults: [LOSE_RESPONSE] },
    { label: 'l5.decline.step2', tag: 'B', title: 'title.retryDeclined', key: 'same' },
    { label: 'l5.decline.step3', tag: 'C', title: 'title.otherCardSameKey', key: 'same', body: { paymentMethod: ANOTHER_CARD } },
    { label: 'l5.decline.step4', tag: 'D', title: 'title.otherCardNewKey', key: 'fresh', body: { paymentMethod: ANOTHER_CARD } },
  ],
  verdict(ctx) {
    const fresh = ctx.newCharges();
    const failed = fresh.filter((c) => c.status === 'failed');
    const succeeded = fresh.filter((c) => c.status === 'succeeded');
    const { A, B, C, D } = ctx.records;
    const declinedOnce = failed.length === 1 && B.status === 402 && B.json?.charge === failed[0].id;
    const ok = outcomeOf(A) === LOST && outcomeOf(B) === REPLAYED && declinedOnce
      && outcomeOf(C) === MISMATCH && outcomeOf(D) === EXECUTED && succeeded.length === 1 && fresh.length === 2;
    return {
      ok,
      key: 'l5.decline.verdict',
      params: {
        b: `${B.status ?? '—'}${B.replayed ? ' (Idempotent-Replayed)' : ''}`,
        code: B.json?.decline_code ?? '—',
        c: C.status ?? '—',
        d: D.status ?? '—',
        failed: failed.length,
        succeeded: succeeded.length,
      },
    };
  },
});

/** Lesson 5's sentences that quote the server: the keys' retention, the purge's batch and interval. */
export function renderLesson5(root, config) {
  const ttl = config ? fmtDuration(config.idempotency_ttl_seconds) : '…';
  setText(root.querySelector('[data-role="l5-ttl"]'), t('l5.p1', { ttl }));
  setHtml(root.querySelector('[data-role="l5-purge"]'), tHtml('l5.purge.p1.html', {
    batch: config ? fmtInt(config.purge_batch) : '…',
    every: config ? fmtDuration(config.purge_interval_seconds) : '…',
    defaultEvery: config ? fmtDuration(config.default_purge_interval_seconds) : '…',
  }));
  setText(root.querySelector('[data-role="l5-retention"]'), t('l5.purge.p2', { ttl }));
}
