// Lesson 2: a change needs a key, a whole new value does not.
//
// Each experiment makes a charge of L2_AMOUNT for itself (step 1), then sends
// one request three times, the first two of whose answers are lost, as a
// client that retries until it hears back would. The track above the diagram
// is what the database holds for that charge after each step.

import { describeRequest } from '../api.js';
import { L } from '../diagram.js';
import { amountOf, shortKeyOf } from '../experiment.js';
import { t, fmtAmount, fmtMs, msUnit } from '../i18n.js';
import { outcomeOf, EXECUTED, REPLAYED, LOST } from '../outcome.js';
import { server } from '../server.js';
import { charge, refund, reply, T, LOSE_RESPONSE, sendCharge, experiment } from './shared.js';

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
    d.message('api', 'client', L('d.lostReplay'), { tag, kind: 'lost', detail: [() => `${rec.status} ${rec.statusText} · ${fmtMs(rec.elapsedMs)}${msUnit()}`] });
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

export const lesson2NoKey = experiment({
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

export const lesson2Key = experiment({
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

export const lesson2Put = experiment({
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
