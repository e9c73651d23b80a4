// What came of one request, told from what the server said and nothing
// else: the status, the problem's `type` and the Idempotent-Replayed header.
// The diagram's narration, the card's one-line explanation, the status's
// colour and the lessons' verdicts all ask outcomeOf(), so the protocol's
// outcomes are told apart in this one place. (How long an answer took is a
// fact of its own, record.elapsedMs, which the lessons about waiting check.)

import { problem } from './server.js';

/** Done now: a new charge was committed (or an expire or purge did its work). */
export const EXECUTED = 'executed';
/** The stored response of the earlier request with this key; nothing was done again. */
export const REPLAYED = 'replayed';
/** 422: the key was used before with a different request. */
export const MISMATCH = 'mismatch';
/** 409: the first request with this key is still being processed. */
export const IN_FLIGHT = 'in-flight';
/** 504 from the demo: the request was processed, its answer thrown away. */
export const LOST = 'lost';
/** 402: the card was declined; a failed charge was recorded, and (with a key) the 402 stored. */
export const DECLINED = 'declined';
/** 503: the card network did not answer; nothing was stored here, the key is free. */
export const UNAVAILABLE = 'unavailable';
/** No answer at all (record.error), or an answer that is none of the above. */
export const ERROR = 'error';

/** The problem types that are an outcome of their own, by slug. */
const BY_PROBLEM = [
  ['idempotency-key-reused', MISMATCH],
  ['idempotency-key-in-flight', IN_FLIGHT],
  ['simulated-lost-response', LOST],
  ['network-unavailable', UNAVAILABLE],
  ['card-declined', DECLINED],
];

/** The outcome of a finished request record (see api.js startRequest). */
export function outcomeOf(record) {
  if (record.error || record.status === null) return ERROR;
  const type = record.problemType;
  if (type) {
    for (const [slug, outcome] of BY_PROBLEM) {
      const known = problem(slug);
      // A decline replayed is a replay: the stored answer, nothing decided again.
      if (type === known.type && record.status === known.status) return outcome === DECLINED && record.replayed ? REPLAYED : outcome;
    }
    return ERROR;
  }
  if (record.status >= 200 && record.status < 300) return record.replayed ? REPLAYED : EXECUTED;
  return ERROR;
}

/** The problem type the server uses for `outcome` ({ type, status, title }). */
export function problemFor(outcome) {
  const found = BY_PROBLEM.find(([, o]) => o === outcome);
  if (!found) throw new Error(`no problem type stands for the outcome “${outcome}”`);
  return problem(found[0]);
}
