// Lesson 6: what a key cannot promise.

import { expireRequest, lookupRequest } from '../api.js';
import { L } from '../diagram.js';
import { amountOf, shortKeyOf } from '../experiment.js';
import { t, tHtml, fmtDuration, fmtSpan } from '../i18n.js';
import { outcomeOf, EXECUTED, REPLAYED, IN_FLIGHT, LOST } from '../outcome.js';
import { server } from '../server.js';
import { charge, reply, narrateCharge, narrateExpire, T, LOSE_RESPONSE, sendCharge, experiment, sameKeyDuplicate, leaseLeft, showLease, setText, setHtml } from './shared.js';

const FORGET_COMMIT = 'forget-commit';

/** (a) The database acknowledges a commit, then loses it, as an asynchronous standby's promotion does. */
export const lesson6Forget = experiment({
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
export const lesson6Abandon = experiment({
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
        // The lease left when the tables were read after A, by the database's clock.
        const leftAfterA = leaseLeft(ctx.latest, key);
        const readAt = performance.now();
        await ctx.sleep(L6_RETRY_AFTER_MS);
        const b = await ctx.send(charge({ ...ctx.vars.body, key, mode }), {
          tag: 'B',
          title: T('title.retryAtOnce'),
          narrate: (dd, rec, bar) => narrateCharge(dd, rec, bar, { holder: 'A' }),
          // A 409 while the lease is live: A may be dead (here it is), and its
          // Retry-After is shorter than the lease: said with the lease's time left.
          explain: (rec) => {
            if (outcomeOf(rec) !== IN_FLIGHT || leftAfterA === null) return null;
            const left = Math.max(0, leftAfterA - (rec.endedAt - readAt));
            ctx.vars.leaseLeftAtB = left;
            return t('card.explain.inFlightLease', { left: fmtSpan(Math.round(left / 100) * 100), retryAfter: rec.header('Retry-After') ?? '—' });
          },
        });
        ctx.vars.leaseLeftAtB ??= leftAfterA === null ? null : Math.max(0, leftAfterA - (b.endedAt - readAt));
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
          // C's card tells what the diagram draws: C took the key over, or the recovery task had.
          explain: (rec) => (outcomeOf(rec) === EXECUTED ? t('card.explain.tookOver') : outcomeOf(rec) === REPLAYED ? t('card.explain.recoveredFirst') : null),
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
      params: {
        a: A?.status ?? '—', row: row?.status ?? '—', b: B?.status ?? '—', c: C?.status ?? '—', n: fresh.length, waited: () => fmtSpan(ctx.vars.waitedMs ?? 0), recovered,
        retryAfter: B?.header('Retry-After') ?? '—',
        left: () => (ctx.vars.leaseLeftAtB === null || ctx.vars.leaseLeftAtB === undefined ? '—' : fmtSpan(Math.round(ctx.vars.leaseLeftAtB / 100) * 100)),
      },
    };
  },
});

/** How often the page reads the tables while it waits for a lease. */
const LEASE_POLL_MS = 300;

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
export const lesson6Retention = experiment({
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
    return { ok: n === 2 && outcomeOf(c) === EXECUTED && !c.replayed, key: 'l6.retention.verdict', params: { n, status: c?.status ?? '—' } };
  },
});

/** Lesson 6's sentences that quote the server: its lease, the keys' retention. */
export function renderLesson6(root, config) {
  setHtml(root.querySelector('[data-role="l6-abandon-intro"]'), tHtml('l6.abandon.p1.html', {
    s: L6_LEASE_MS / 1000,
    ms: L6_LEASE_MS,
    lease: config ? fmtDuration(config.idempotency_lease_seconds) : '…',
  }));
  const ttl = config ? fmtDuration(config.idempotency_ttl_seconds) : '…';
  setText(root.querySelector('[data-role="l6-retention-intro"]'), t('l6.retention.p1', { ttl }));
}
