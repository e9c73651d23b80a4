// Line breaking that keeps a number with its unit ("5秒", "4,560 ms",
// "¥300") and an identifier ("Idempotency-Key", "lose-response",
// "delay-commit=5000") whole.
//
// A browser may break between a digit and a Japanese unit, and after every
// hyphen; CSS alone cannot forbid those breaks without forbidding them in
// prose too. So every text the page draws (static or rendered later, in
// either language) is watched once here, and such runs are wrapped in
// <span class="nb"> (white-space: nowrap). The text stays the same to read,
// select and copy; only where a line may end changes.

/** Units written after a number, in both languages (longest first where one starts another). */
const UNITS = ['ミリ秒', '時間', '文字', '種類', 'か所', 'ms', 'min', 'KiB', 'MiB', 'px', '秒', '分', '日', '円', '件', 'つ', '回', '個', '通', '行', '人', '枚', '%', 's', 'h'];
const NUMBER = '\\d[\\d,]*(?:\\.\\d+)?';
const NUMBER_UNIT = `(?:[¥$€]${NUMBER}|${NUMBER}(?:\\s?[〜~–]\\s?${NUMBER})?[ \\u00a0]?(?:${UNITS.join('|')})(?![A-Za-z]))`;
/** Words joined by "-" or "=" (a header, a fault, a mode), with a header's colon; a query parameter ("?room="). */
const IDENTIFIER = '[A-Za-z][A-Za-z0-9]*(?:[-=][A-Za-z0-9.]+)+:?|\\?[a-z]+=[A-Za-z0-9.-]*';
const RUN = new RegExp(`(?<![\\w.-])(?:${NUMBER_UNIT}|${IDENTIFIER})(?![\\w-])`, 'g');
/** An id (a UUID, a random key) may and must break on a phone; so may anything this long. */
const UUID_LIKE = /^[0-9a-f]+(?:-[0-9a-f]+){2,}$/i;
const LONGEST = 40;

/**
 * Where runs are left as they are: code blocks, drawings (the diagram wraps
 * its own lines), the database's rows (ids and keys must break to fit a
 * phone), and what is not seen.
 */
export const KEEP_WHOLE_SKIP = 'script, style, textarea, pre, svg, [data-testid="db-panel"], .visually-hidden, .nb';

function wanted(run) {
  return run.length <= LONGEST && !(UUID_LIKE.test(run) && /\d/.test(run));
}

/** Wraps the runs of one text node; leaves it alone when there are none. */
function wrapText(node) {
  const parent = node.parentElement;
  if (!parent || parent.closest(KEEP_WHOLE_SKIP)) return;
  const text = node.data;
  RUN.lastIndex = 0;
  let match;
  let last = 0;
  let fragment = null;
  while ((match = RUN.exec(text))) {
    const run = match[0];
    if (!wanted(run)) continue;
    fragment ??= document.createDocumentFragment();
    if (match.index > last) fragment.append(text.slice(last, match.index));
    const span = document.createElement('span');
    span.className = 'nb';
    span.textContent = run;
    fragment.append(span);
    last = match.index + run.length;
  }
  if (!fragment) return;
  if (last < text.length) fragment.append(text.slice(last));
  node.replaceWith(fragment);
}

function wrapAll(root) {
  if (root.nodeType === Node.TEXT_NODE) {
    wrapText(root);
    return;
  }
  if (root.nodeType !== Node.ELEMENT_NODE || root.closest(KEEP_WHOLE_SKIP)) return;
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  for (const node of nodes) wrapText(node);
}

/** Wraps the runs under `root` now, and in whatever is drawn there later. */
export function keepWhole(root = document.body) {
  wrapAll(root);
  new MutationObserver((records) => {
    for (const record of records) {
      if (record.type === 'characterData') wrapText(record.target);
      else for (const node of record.addedNodes) wrapAll(node);
    }
  }).observe(root, { childList: true, subtree: true, characterData: true });
}
