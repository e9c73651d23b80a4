// The self-check at the end of the page: one question or two per lesson,
// answered in the page. Each question is a radio group in a fieldset (its
// legend is the question) with a "Check" button; the feedback, in a live
// region, says whether the answer is right, explains it, and links back to
// the experiment that shows it. Nothing is sent to the server.
//
// It cannot be gamed: the first answer checked is the one scored; the
// options are shuffled at each load (the right ones spread evenly over the
// positions, so always picking one position scores at most 4 of 12); a
// wrong answer is told what is wrong with it, and the right one is shown
// only after the learner's own second try, or once every question has a
// first answer.

import { t, tHtml, escapeHtml as esc, onLangChange, sentenceGap } from './i18n.js';
import { sandboxOrNull, onSandboxChange } from './sandbox.js';

// The answers are kept per sandbox (localStorage): a reload shows them
// again, first tries included, so reloading cannot buy a second first try.
// A new sandbox (another tab, or one made after the old expired) starts afresh.
const STORAGE_PREFIX = 'charges.selfcheck.';

function storageKey(sandbox = sandboxOrNull()) {
  return sandbox?.account_id !== undefined && sandbox?.account_id !== null ? `${STORAGE_PREFIX}${sandbox.account_id}` : null;
}

/** The kept results for this sandbox, checked against the questions (anything else is dropped). */
function loadResults() {
  const key = storageKey();
  if (!key) return null;
  try {
    const saved = JSON.parse(localStorage.getItem(key) ?? 'null');
    if (!Array.isArray(saved) || saved.length !== QUESTIONS.length) return null;
    return saved.map((r, i) => {
      const valid = (j) => Number.isInteger(j) && j >= 0 && j < QUESTIONS[i].options;
      if (!r || !valid(r.first) || !Number.isInteger(r.tries) || r.tries < 1) return null;
      const choice = valid(r.choice) ? r.choice : null;
      return { first: r.first, tries: r.tries, choice, correct: choice === QUESTIONS[i].answer };
    });
  } catch {
    return null;
  }
}

function saveResults(results) {
  const key = storageKey();
  if (!key) return;
  try {
    localStorage.setItem(key, JSON.stringify(results.map((r) => (r && r.first !== null ? { first: r.first, tries: r.tries, choice: r.choice } : null))));
  } catch {
    // Not kept across a reload; still scored in this page.
  }
}

/**
 * The questions, as data: `q` is the i18n prefix (q.text, q.a0…q.aN,
 * q.why, and q.aN.wrong for each wrong option: the misconception it
 * stands for), `answer` the index of the right option, `see` the id of the
 * heading of the experiment that shows it.
 */
export const QUESTIONS = [
  { q: 'sc.q1', options: 3, answer: 1, see: 'l1-title' },
  { q: 'sc.q2', options: 3, answer: 2, see: 'l2-put' },
  { q: 'sc.q3', options: 3, answer: 1, see: 'l3-race' },
  { q: 'sc.q4', options: 3, answer: 0, see: 'l4-title' },
  { q: 'sc.q5', options: 3, answer: 2, see: 'l5-reuse' },
  { q: 'sc.q11', options: 3, answer: 1, see: 'l5-decline' },
  { q: 'sc.q6', options: 3, answer: 1, see: 'l6-retention' },
  { q: 'sc.q7', options: 3, answer: 1, see: 'l6-forget' },
  { q: 'sc.q8', options: 3, answer: 0, see: 'l6-abandon' },
  { q: 'sc.q9', options: 3, answer: 1, see: 'l7-fresh' },
  { q: 'sc.q10', options: 3, answer: 2, see: 'l7-recover' },
  { q: 'sc.q12', options: 3, answer: 0, see: 'l8-lost' },
];

export function mountSelfCheck(root) {
  const host = root.querySelector('[data-role="self-check"]');
  if (!host) return;
  const score = root.querySelector('[data-role="self-check-score"]');
  const orders = shuffledOrders(QUESTIONS);
  // Per question: null until checked, then { first, tries, choice, correct }:
  // the first answer checked (scored), how many checks, the last one.
  const results = QUESTIONS.map(() => null);
  const restore = () => {
    const saved = loadResults() ?? QUESTIONS.map(() => null);
    saved.forEach((r, i) => { results[i] = r; });
    fieldsets.forEach((fieldset, i) => {
      for (const input of fieldset.querySelectorAll('input[type="radio"]')) input.checked = results[i]?.choice === Number(input.value);
    });
  };

  host.innerHTML = QUESTIONS.map(
    (question, i) => `
    <fieldset class="quiz" data-testid="quiz-${i + 1}" data-question="${i + 1}">
      <legend data-role="legend"></legend>
      <div class="quiz-options">
        ${orders[i].map((j, position) => `
          <label class="quiz-option">
            <input type="radio" name="quiz-${i + 1}" value="${j}" data-testid="quiz-${i + 1}-option-${position + 1}">
            <span data-role="option" data-option="${j}"></span>
          </label>`).join('')}
      </div>
      <button type="button" class="secondary quiz-check" data-testid="quiz-check" data-role="check"></button>
      <div class="quiz-feedback" data-testid="quiz-feedback" role="status" aria-live="polite"></div>
    </fieldset>`,
  ).join('');

  const fieldsets = [...host.querySelectorAll('fieldset.quiz')];
  /** Once every question has a first answer, the right answers are shown. */
  const allAnswered = () => results.every((r) => r && r.first !== null);

  const renderFeedback = (i) => {
    const fieldset = fieldsets[i];
    const feedback = fieldset.querySelector('[data-testid="quiz-feedback"]');
    const result = results[i];
    const question = QUESTIONS[i];
    fieldset.dataset.state = !result || result.choice === null ? '' : result.correct ? 'correct' : 'wrong';
    if (!result) {
      feedback.innerHTML = '';
      delete feedback.dataset.correct;
      delete feedback.dataset.revealed;
      return;
    }
    if (result.choice === null) {
      feedback.dataset.correct = 'none';
      feedback.innerHTML = `<p>${esc(t('sc.pickFirst'))}</p>`;
      return;
    }
    const heading = document.getElementById(question.see);
    const where = heading ? heading.textContent.trim() : question.see;
    const link = `<p><a href="#${esc(question.see)}" data-testid="quiz-link">${esc(t('sc.see', { where }))}</a></p>`;
    feedback.dataset.correct = String(result.correct);
    if (result.correct) {
      const title = result.first === question.answer ? t('sc.right') : t('sc.rightLater');
      feedback.dataset.revealed = 'true';
      feedback.innerHTML = `<p><strong class="quiz-right"><span aria-hidden="true">✓ </span>${esc(title)}</strong>${sentenceGap()}${tHtml(`${question.q}.why.html`)}</p>${link}`;
      return;
    }
    // Wrong: what is wrong with this very answer; the right one only after a second try, or at the end.
    const reveal = result.tries >= 2 || allAnswered();
    feedback.dataset.revealed = String(reveal);
    const wrong = `<p><strong class="quiz-wrong"><span aria-hidden="true">✗ </span>${esc(t('sc.wrong', { n: i + result.tries }))}</strong>${sentenceGap()}${tHtml(`${question.q}.a${result.choice}.wrong.html`)}</p>`;
    feedback.innerHTML = reveal
      ? `${wrong}<p>${esc(t('sc.rightIs'))}${tHtml(`${question.q}.a${question.answer}.html`).replace(/[.。]$/, '')}${esc(t('sc.rightIsEnd'))}${sentenceGap()}${tHtml(`${question.q}.why.html`)}</p>${link}`
      : `${wrong}<p>${esc(t('sc.tryAgain'))}</p>`;
  };

  const renderScore = () => {
    const answered = results.filter((r) => r && r.first !== null);
    const right = answered.filter((r) => r.first === QUESTIONS[results.indexOf(r)].answer).length;
    // The closing sentence fits the score: all right at once, or the right answers shown under the misses.
    const end = right === QUESTIONS.length ? 'sc.scoreEndAll' : 'sc.scoreEnd';
    score.textContent = answered.length
      ? t(allAnswered() ? end : 'sc.score', { right, total: QUESTIONS.length, checked: answered.length })
      : t('sc.scoreNone', { total: QUESTIONS.length });
    score.dataset.right = String(right);
    score.dataset.answered = String(answered.length);
  };

  const render = () => {
    QUESTIONS.forEach((question, i) => {
      const fieldset = fieldsets[i];
      fieldset.querySelector('[data-role="legend"]').innerHTML = `<span class="quiz-num">${i + 1}.</span> ${tHtml(`${question.q}.text.html`)}`;
      fieldset.querySelectorAll('[data-role="option"]').forEach((span) => {
        span.innerHTML = tHtml(`${question.q}.a${span.dataset.option}.html`);
      });
      fieldset.querySelector('[data-role="check"]').textContent = t('sc.check');
      renderFeedback(i);
    });
    renderScore();
  };

  fieldsets.forEach((fieldset, i) => {
    fieldset.querySelector('[data-role="check"]').addEventListener('click', () => {
      const chosen = fieldset.querySelector('input[type="radio"]:checked');
      const choice = chosen ? Number(chosen.value) : null;
      const before = results[i] ?? { first: null, tries: 0 };
      const wasAll = allAnswered();
      // Empty first, so the same message is announced again.
      fieldset.querySelector('[data-testid="quiz-feedback"]').innerHTML = '';
      results[i] = choice === null
        ? { ...before, choice: null, correct: false }
        : { first: before.first ?? choice, tries: before.tries + 1, choice, correct: choice === QUESTIONS[i].answer };
      saveResults(results);
      requestAnimationFrame(() => {
        // The last first answer reveals the right answers of every question still wrong.
        if (allAnswered() && !wasAll) QUESTIONS.forEach((_, k) => renderFeedback(k));
        else renderFeedback(i);
        renderScore();
      });
    });
    // A new choice clears the shown verdict (it has not been checked yet); the first answer stays scored.
    fieldset.addEventListener('change', () => {
      if (results[i]?.choice !== undefined && results[i].choice !== null) {
        results[i] = { ...results[i], choice: null, correct: false };
        const feedback = fieldset.querySelector('[data-testid="quiz-feedback"]');
        fieldset.dataset.state = '';
        feedback.innerHTML = '';
        delete feedback.dataset.correct;
      }
    });
  });

  restore();
  render();
  onLangChange(render);
  // The sandbox arrives after the page is mounted on a first visit, or changes when the old one expired.
  let shown = storageKey();
  onSandboxChange(() => {
    if (storageKey() === shown) return;
    shown = storageKey();
    restore();
    render();
  });
}

/**
 * Each question's options in the order shown, as indices into its options.
 * The right answers are spread over the positions as evenly as the count
 * allows (11 questions, 3 options: 4, 4 and 3), which position gets the
 * extra one and the rest of each order chosen at random at every load.
 */
function shuffledOrders(questions) {
  const width = Math.max(...questions.map((q) => q.options));
  const offset = crypto.getRandomValues(new Uint32Array(1))[0] % width;
  const slots = shuffle(questions.map((_, i) => (i + offset) % width));
  return questions.map((question, i) => {
    const position = Math.min(slots[i], question.options - 1);
    const wrong = shuffle([...Array(question.options).keys()].filter((j) => j !== question.answer));
    wrong.splice(position, 0, question.answer);
    return wrong;
  });
}

function shuffle(items) {
  const a = [...items];
  const random = new Uint32Array(a.length);
  crypto.getRandomValues(random);
  for (let i = a.length - 1; i > 0; i -= 1) {
    const j = random[i] % (i + 1);
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}
