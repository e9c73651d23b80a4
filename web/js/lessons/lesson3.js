// Lesson 3: the idempotency key.

import { L } from '../diagram.js';
import { amountOf, shortKeyOf } from '../experiment.js';
import { tHtml } from '../i18n.js';
import { outcomeOf, EXECUTED, REPLAYED } from '../outcome.js';
import { server } from '../server.js';
import { charge, reply, narrateCharge, T, LOSE_RESPONSE, experiment, setHtml } from './shared.js';

export const lesson3Retry = experiment({
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

export const lesson3Naive = experiment({
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

export const lesson3Guarded = experiment({
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

/** Lesson 3's sentence that quotes the server: the pause of check-then-insert. */
export function renderLesson3(root, config) {
  setHtml(root.querySelector('[data-role="l3-race"]'), tHtml('l3.race.p1.html', { pause: config?.check_then_insert_pause_ms ?? '…' }));
}
