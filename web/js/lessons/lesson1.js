// Lesson 1: retrying without a key.

import { LOSE_RESPONSE, experiment } from './shared.js';

export const lesson1 = experiment({
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
