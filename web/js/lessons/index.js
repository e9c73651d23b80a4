// The lessons, in the page's order: one module per lesson (lesson1.js …
// lesson8.js), each holding its experiments and the sentences of its text
// that quote the server's settings; shared.js holds what they share (the
// requests, the narration of a charge, an experiment's shape).
//
// This module lists every experiment by the id of its placeholder in
// index.html, mounts them, and renders the sentences that quote the server.

import { Experiment } from '../experiment.js';
import { serverOrNull } from '../server.js';
import { lesson1 } from './lesson1.js';
import { lesson2NoKey, lesson2Key, lesson2Put } from './lesson2.js';
import { lesson3Retry, lesson3Naive, lesson3Guarded, renderLesson3 } from './lesson3.js';
import { lesson4, lesson4Rollback, mountLesson4Modes, renderLesson4 } from './lesson4.js';
import { lesson5Expire, lesson5Reuse, lesson5Decline, lesson5NewKey, renderLesson5 } from './lesson5.js';
import { lesson6Forget, lesson6Abandon, lesson6Retention, renderLesson6 } from './lesson6.js';
import { lesson7Lost, lesson7Fresh, lesson7Recover, lesson7Down, renderLesson7 } from './lesson7.js';
import { lesson8Lost, lesson8NoInbox, lesson8Tampered, renderLesson8 } from './lesson8.js';

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
  'l4-rollback': lesson4Rollback,
  'l5-expire': lesson5Expire,
  'l5-reuse': lesson5Reuse,
  'l5-decline': lesson5Decline,
  'l5-newkey': lesson5NewKey,
  'l6-forget': lesson6Forget,
  'l6-abandon': lesson6Abandon,
  'l6-retention': lesson6Retention,
  'l7-lost': lesson7Lost,
  'l7-fresh': lesson7Fresh,
  'l7-recover': lesson7Recover,
  'l7-down': lesson7Down,
  'l8-lost': lesson8Lost,
  'l8-noinbox': lesson8NoInbox,
  'l8-tampered': lesson8Tampered,
};

export function mountExperiments(root) {
  for (const host of root.querySelectorAll('[data-experiment]')) {
    const def = EXPERIMENTS[host.dataset.experiment];
    if (!def) continue;
    const experiment = new Experiment(host, def);
    if (def === lesson4) mountLesson4Modes(root, experiment);
  }
}

/**
 * The sentences of lessons 3 to 8 that quote the server's own settings (GET
 * /demo/config), or a lesson's own timing; '…' until the settings have been read.
 */
export function renderServerFacts(root) {
  const config = serverOrNull();
  renderLesson3(root, config);
  renderLesson4(root, config);
  renderLesson5(root, config);
  renderLesson6(root, config);
  renderLesson7(root, config);
  renderLesson8(root, config);
}
