// The self-check at the end of the page: one question or two per lesson,
// answered in the page. Each question is a radio group in a fieldset (its
// legend is the question) with a "Check" button; the feedback, in a live
// region, says whether the answer is right, explains it, and links back to
// the experiment that shows it. Nothing is sent to the server.

import { t, tHtml, escapeHtml as esc, onLangChange } from './i18n.js';

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
  { q: 'sc.q6', options: 3, answer: 1, see: 'l6-retention' },
  { q: 'sc.q7', options: 3, answer: 1, see: 'l6-forget' },
  { q: 'sc.q8', options: 3, answer: 0, see: 'l6-abandon' },
  { q: 'sc.q9', options: 3, answer: 1, see: 'l7-fresh' },
  { q: 'sc.q10', options: 3, answer: 2, see: 'l7-recover' },
];

export function mountSelfCheck(root) {
  const host = root.querySelector('[data-role="self-check"]');
  if (!host) return;
  const score = root.querySelector('[data-role="self-check-score"]');
  // What was checked, per question: null, or { choice, correct }.
  const results = QUESTIONS.map(() => null);

  host.innerHTML = QUESTIONS.map(
    (question, i) => `
    <fieldset class="quiz" data-testid="quiz-${i + 1}" data-question="${i + 1}">
      <legend data-role="legend"></legend>
      <div class="quiz-options">
        ${Array.from({ length: question.options }, (_, j) => `
          <label class="quiz-option">
            <input type="radio" name="quiz-${i + 1}" value="${j}" data-testid="quiz-${i + 1}-option-${j + 1}">
            <span data-role="option"></span>
          </label>`).join('')}
      </div>
      <button type="button" class="secondary quiz-check" data-testid="quiz-check" data-role="check"></button>
      <div class="quiz-feedback" data-testid="quiz-feedback" role="status" aria-live="polite"></div>
    </fieldset>`,
  ).join('');

  const fieldsets = [...host.querySelectorAll('fieldset.quiz')];

  const renderFeedback = (i) => {
    const fieldset = fieldsets[i];
    const feedback = fieldset.querySelector('[data-testid="quiz-feedback"]');
    const result = results[i];
    const question = QUESTIONS[i];
    fieldset.dataset.state = result === null ? '' : result.correct ? 'correct' : 'wrong';
    if (result === null) {
      feedback.innerHTML = '';
      delete feedback.dataset.correct;
      return;
    }
    if (result.choice === null) {
      feedback.dataset.correct = 'none';
      feedback.innerHTML = `<p>${esc(t('sc.pickFirst'))}</p>`;
      return;
    }
    const heading = document.getElementById(question.see);
    const where = heading ? heading.textContent.trim() : question.see;
    feedback.dataset.correct = String(result.correct);
    const verdict = result.correct
      ? `<strong class="quiz-right"><span aria-hidden="true">✓ </span>${esc(t('sc.right'))}</strong>`
      : `<strong class="quiz-wrong"><span aria-hidden="true">✗ </span>${esc(t('sc.wrong'))}</strong> ${tHtml(`${question.q}.a${result.choice}.wrong.html`)}</p>
        <p>${esc(t('sc.rightIs'))}${tHtml(`${question.q}.a${question.answer}.html`).replace(/[.。]$/, '')}${esc(t('sc.rightIsEnd'))}`;
    feedback.innerHTML = `<p>${verdict} ${tHtml(`${question.q}.why.html`)}</p>
      <p><a href="#${esc(question.see)}" data-testid="quiz-link">${esc(t('sc.see', { where }))}</a></p>`;
  };

  const renderScore = () => {
    const checked = results.filter((r) => r && r.choice !== null);
    const right = checked.filter((r) => r.correct).length;
    score.textContent = checked.length ? t('sc.score', { right, total: QUESTIONS.length, checked: checked.length }) : t('sc.scoreNone', { total: QUESTIONS.length });
    score.dataset.right = String(right);
  };

  const render = () => {
    QUESTIONS.forEach((question, i) => {
      const fieldset = fieldsets[i];
      fieldset.querySelector('[data-role="legend"]').innerHTML = `<span class="quiz-num">${i + 1}.</span> ${tHtml(`${question.q}.text.html`)}`;
      fieldset.querySelectorAll('[data-role="option"]').forEach((span, j) => {
        span.innerHTML = tHtml(`${question.q}.a${j}.html`);
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
      // Empty first, so the same message is announced again.
      fieldset.querySelector('[data-testid="quiz-feedback"]').innerHTML = '';
      results[i] = { choice, correct: choice === QUESTIONS[i].answer };
      requestAnimationFrame(() => {
        renderFeedback(i);
        renderScore();
      });
    });
    // A new choice clears the old verdict; it has not been checked yet.
    fieldset.addEventListener('change', () => {
      if (results[i] !== null) {
        results[i] = null;
        renderFeedback(i);
        renderScore();
      }
    });
  });

  render();
  onLangChange(render);
}
