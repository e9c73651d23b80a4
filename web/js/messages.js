// Every piece of text the page shows, in English and Japanese.
//
// A value is either a string with {placeholders} or a function of the
// parameters (used for plurals). Keys ending in ".html" hold trusted markup
// written here; their parameters are escaped before they are inserted.

const en = {
  // ---- page frame -------------------------------------------------------
  'page.title': 'Why did the retry not charge twice? — charges',
  'skip': 'Skip to the lessons',
  'brand.sub': 'a payment API you can poke',
  'lang.switch': '日本語',
  'lang.switchLabel': 'Show this page in Japanese',
  'reset': 'Reset demo data',
  'reset.busy': 'Resetting…',
  'reset.done': 'Demo data reset: the tables are empty.',
  'reset.failed': 'Reset failed: {message}',
  'status.loading': 'Connecting to the API…',
  'status.backend': 'Database: {backend} · default mode: {mode}',
  'status.db': p => `Now in the database: ${plural(p.charges, 'charge', 'charges')}, ${plural(p.keys, 'key', 'keys')}`,
  'status.offline': 'Cannot reach the API on this page’s server. Is it running?',

  // ---- introduction -----------------------------------------------------
  'intro.title': 'Why did the retry not charge twice?',
  'intro.lead.html':
    'A hands-on tour of HTTP <strong>idempotency keys</strong>. Every button below sends a real request to the payment API behind this page and then shows what its database holds.',
  'intro.p1.html':
    'A shop’s server asks a payment API to charge a customer ¥1,000. What comes back is <code>504 Gateway Timeout</code>. Was the customer charged? The timeout cannot say. Maybe the request never reached the API. Maybe it was processed, and only the answer was lost on the way back. The lessons show what goes wrong when you simply send the request again, and how an idempotency key makes sending it again safe.',
  'intro.how.title': 'How to use this page',
  'intro.how.html':
    'In each experiment, press the numbered buttons in order. For every request you get a <strong>sequence diagram</strong> (client, API, database), the <strong>exact request and response</strong>, the <strong>time it took</strong>, and the <strong>tables in the database</strong> right after it. <strong>Reset demo data</strong> (top of the page) empties the tables, so each experiment can start from nothing.',
  'toc.title': 'Lessons',
  'toc.l1': '1. Retrying without a key',
  'toc.l2': '2. Operations that are safe to repeat',
  'toc.l3': '3. The idempotency key',
  'toc.l4': '4. A retry while the first is still running',
  'toc.l5': '5. How long a key lives, and reusing one',
  'toc.end': 'Summary',

  // ---- lesson 1 ---------------------------------------------------------
  'l1.title': '1. Retrying without a key',
  'l1.p1': 'When no answer arrives, the client can do one of two things: send the request again, or give up. Each choice goes wrong in one of the two cases it cannot tell apart.',
  'l1.table.caption': 'What happens, depending on what the client cannot see',
  'l1.table.corner': 'The client…',
  'l1.table.lostReq': 'the request never arrived',
  'l1.table.lostRes': 'the request was processed, the answer was lost',
  'l1.table.retry': 'sends it again',
  'l1.table.giveUp': 'gives up',
  'l1.table.retryLostReq': 'charged once: fine',
  'l1.table.retryLostRes': 'charged twice',
  'l1.table.giveUpLostReq': 'not charged: the customer has to try again',
  'l1.table.giveUpLostRes': 'the customer paid, but the shop thinks it failed',
  'l1.p2.html':
    'Most clients send it again. In this experiment the first request is processed and committed, but the demo server throws its answer away and sends a <code>504</code> instead, like a gateway that timed out (header <code>Demo-Fault: lose-response</code>). Then the client sends the same body again, <strong>without</strong> any key.',
  'l1.step1': 'Send the charge (the answer gets lost)',
  'l1.step2': 'Send the same request again (no key)',
  'l1.verdict.ok.html': p =>
    `The customer wanted <strong>one</strong> ¥1,000 charge, and the table gained <strong>${p.n}</strong>. Nothing in the second request told the server that it was a repeat, so it charged again.`,
  'l1.verdict.bad.html': p => `Expected the table to gain 2 charges, but it gained ${p.n}.`,
  'l1.p3': 'The client cannot find out whether its first attempt went through, so the API has to be the one that recognises a repeat.',

  // ---- lesson 2 ---------------------------------------------------------
  'l2.title': '2. Operations that are safe to repeat',
  'l2.p1.html':
    'Some operations can be repeated without harm simply because of how they are phrased. Take an account holding 500. “<strong>Decrease</strong> the balance by 100” describes a change. “<strong>Set</strong> the balance to 400” describes the end result. Apply each one three times:',
  'l2.localNote': 'This lesson runs only in your browser: no request is sent.',
  'l2.decrease': 'Decrease the balance by 100',
  'l2.set': 'Set the balance to 400',
  'l2.applyOnce': p => `Apply once more (${p.done}/3)`,
  'l2.applyDone': 'Applied 3 times',
  'l2.startOver': 'Start over at 500',
  'l2.after': p =>
    p.done === 0
      ? 'Both start at 500.'
      : `After ${plural(p.done, 'time', 'times')}: “decrease” gives ${p.dec}, “set” gives ${p.set}.`,
  'l2.p2.html':
    'The “set” form lands on the same balance no matter how often it arrives, as long as the very same request is repeated. HTTP draws the same line. RFC 9110 calls a method <strong>idempotent</strong> when several identical requests are meant to have the same effect on the server as one. PUT and DELETE are idempotent, and so are the <em>safe</em> methods (GET, HEAD, OPTIONS, TRACE), which do not ask for any change. POST is not.',
  'l2.methods.caption': 'HTTP methods in RFC 9110',
  'l2.methods.method': 'Method',
  'l2.methods.what': 'What it asks for',
  'l2.methods.idem': 'Idempotent?',
  'l2.methods.get': 'Read the resource; change nothing (safe).',
  'l2.methods.put': 'Make the resource at this URL equal to the body.',
  'l2.methods.delete': 'Remove the resource at this URL.',
  'l2.methods.post': 'Process the body; may create something new each time.',
  'l2.yes': 'yes',
  'l2.no': 'no',
  'l2.p3': 'Only the intended effect has to be the same, not the answer. Delete the same order twice:',
  'l2.delete': 'Send DELETE /orders/42',
  'l2.recreate': 'Put order 42 back',
  'l2.orderExists': 'Order 42 exists.',
  'l2.orderGone': 'Order 42 is gone.',
  'l2.deleteLine': p => `DELETE /orders/42 → ${p.status} · afterwards: order 42 is gone`,
  'l2.p4.html':
    'The second answer is <code>404</code> instead of <code>204</code>, but what the caller wanted (no order 42) holds either way, so DELETE is still idempotent. Side effects such as log lines may pile up too. Creating a charge cannot be rephrased like this: every <code>POST /charges</code> creates a charge that did not exist before, so there is no end result the client could name. This is where idempotency keys come in.',

  // ---- lesson 3 ---------------------------------------------------------
  'l3.title': '3. The idempotency key',
  'l3.p1.html':
    'The client makes up a unique value for each charge it means to make (a random UUID) and sends it in the <code>Idempotency-Key</code> header. Every retry of that charge carries the same value. The server writes the key down in the same database transaction as the charge, together with the response it sends. When the key arrives again, the server does not charge: it sends back the stored response.',
  'l3.retry.title': 'The same lost answer, now with a key',
  'l3.retry.p': 'As in lesson 1 the first answer is lost, but this time both attempts carry one key.',
  'l3.retry.step1': 'Send the charge with a key (the answer gets lost)',
  'l3.retry.step2': 'Send it again with the same key',
  'l3.retry.verdict.ok.html': p =>
    `The table gained <strong>${p.n}</strong> charge. The retry got <code>201</code> with <code>Idempotent-Replayed: true</code>, and its id <code>${p.id}</code> is the id of the charge the first attempt stored.`,
  'l3.retry.verdict.bad.html': p =>
    `Expected one new charge and a replayed 201 with the stored id; got ${p.n} new charge(s), replayed: ${p.replayed}, same id: ${p.same}.`,
  'l3.p2':
    'Storing the response is not what makes the request idempotent; the key alone prevents the second charge. It is a kindness to the client: it cannot tell a first attempt from a retry, so getting the same answer both times keeps its code simple.',
  'l3.race.title': 'Why a unique constraint?',
  'l3.race.p1.html':
    'The obvious way to build this is: look the key up, and if it is not there, charge and write the key down. The trouble is the moment between looking and writing. Two requests with the same key that arrive together can both look, both find nothing, and both charge. The demo’s <code>Demo-Mode: check-then-insert</code> does exactly this. It waits {pause} ms between the look-up and the insert so the gap is easy to hit, and its key table, <code>unguarded_keys</code>, has no unique constraint.',
  'l3.naive.title': 'Two at once: look first, then insert',
  'l3.naive.step1': 'Send two requests with one key at the same moment (check-then-insert)',
  'l3.naive.verdict.ok.html': p =>
    `Both requests found no key, and both charged: the table gained <strong>${p.n}</strong> charges, and <code>unguarded_keys</code> now holds <strong>${p.rows}</strong> rows with the same key.`,
  'l3.naive.verdict.bad.html': p => `Expected 2 new charges; got ${p.n} (unguarded_keys rows for this key: ${p.rows}).`,
  'l3.race.p2.html':
    'The real mode writes the key <strong>first</strong>, into a column under a <code>UNIQUE</code> constraint (<code>INSERT … ON CONFLICT DO NOTHING</code>). The database accepts only one of the two rows. The other request learns that the key is taken and answers with the stored response.',
  'l3.guarded.title': 'Two at once: the unique constraint',
  'l3.guarded.step1': 'Send two requests with one key at the same moment (unique constraint)',
  'l3.guarded.verdict.ok.html': p =>
    `The table gained <strong>${p.n}</strong> charge. One request charged; the other got the stored <code>201</code> (<code>Idempotent-Replayed: true</code>) with the same id.`,
  'l3.guarded.verdict.bad.html': p => `Expected exactly 1 new charge and one replay; got ${p.n} new charge(s), ${p.replays} replay(s).`,

  // ---- lesson 4 ---------------------------------------------------------
  'l4.title': '4. A retry while the first is still running',
  'l4.p1.html': p =>
    `So far the retry arrived after the first attempt had finished. What if it arrives while the first one is still working? Here the first request (A) is held inside the server for ${p.s} seconds before its charge is committed (<code>Demo-Fault: delay-commit=${p.ms}</code>). ${Number(p.after) === 1 ? 'One second' : `${p.after} seconds`} after sending it, the client sends the retry (B) with the same key and the same body. What B gets depends on where the server records the key. Pick a design and try both.`,
  'l4.mode.legend': 'Design to try',
  'l4.mode.atomicHint': 'key, charge and stored response in one statement',
  'l4.mode.keyFirstHint': 'the key is committed on its own first, the charge after',
  'l4.p2.atomic.html':
    'In the <strong>atomic</strong> design the key row, the charge and the stored response are written together: the server decides the charge’s id and its <code>201</code> first, so on PostgreSQL all of it is <strong>one SQL statement</strong>, which commits whole or not at all, just like a transaction. Here the demo holds that statement’s transaction open, so A’s key row is invisible to others until A commits. Yet the unique constraint also checks rows that are not committed yet, so B’s insert of the same key has to <strong>wait</strong> until A commits or rolls back. Once A commits, B finds the key and returns the stored <code>201</code>. Expect B to take about {wait} seconds: a measurement of the same two inserts on PostgreSQL 17 took 4009 ms.',
  'l4.p2.keyFirst.html':
    'In the <strong>key-first</strong> design A uses two transactions. The first registers the key as <code>in_progress</code> with a lease and commits right away. The second is the slow one this time: it takes {s} seconds, then writes the charge and completes the key row in one statement. So B finds a committed row saying “in progress”. The server does not wait: within a few milliseconds it answers <code>409 Conflict</code> (<code>{type}</code>) with <code>Retry-After: {retryAfter}</code>, and B charges nothing. The page reads the tables right after B’s answer, so you can see that row while A is still running. Once A has finished, the page sends the same request once more (C), and C gets the stored <code>201</code>.',
  'l4.backend': p =>
    `This server runs on ${p.backend}, and its default mode is “${p.serverMode}”. This experiment runs in “${p.mode}” mode: every request it sends carries Demo-Mode: ${p.mode}.`,
  'l4.step1.atomic': 'Send A (holds {s} s), then B with the same key {after} s later',
  'l4.step1.keyFirst': 'Send A (holds {s} s), B with the same key {after} s later, then C once A has finished',
  'l4.verdict.ok.html': p =>
    `B waited <strong>${p.ms} ms</strong>, then got the stored <code>201</code> with <code>Idempotent-Replayed: true</code> and A’s charge id. The table gained <strong>${p.n}</strong> charge.`,
  'l4.verdict.bad.html': p =>
    `Expected B to wait about ${p.expectMs} ms and get a replayed 201, with one new charge; B took ${p.ms} ms, status ${p.status}, replayed: ${p.replayed}, new charges: ${p.n}.`,
  'l4.kf.verdict.ok.html': p =>
    `B got <code>409 Conflict</code> after <strong>${p.ms} ms</strong> (<code>Retry-After: ${p.retryAfter}</code>): the key row was already committed as <code>in_progress</code>, so the server did not wait for A. Once A had finished, C with the same key got the stored <code>201</code> with <code>Idempotent-Replayed: true</code> and A’s charge id. The table gained <strong>${p.n}</strong> charge.`,
  'l4.kf.verdict.bad.html': p =>
    `Expected B to get 409 idempotency-key-in-flight within ${p.maxMs} ms, the key row to be in_progress right after it, and C to get a replayed 201 with A’s id, with one new charge. B: ${p.bStatus} after ${p.ms} ms; key row after B: ${p.rowStatus}; C: ${p.cStatus}, replayed: ${p.replayed}, same id: ${p.same}; new charges: ${p.n}.`,
  'l4.p3':
    'Whether B gives up while waiting or stops at the 409, the client still does not know whether it was charged. A key promises at most one charge, not an answer. Sending the same key again later fetches the stored answer.',
  'l4.tradeoff.title': 'Waiting or 409: what each design costs',
  'l4.tradeoff.p1.html':
    'Both designs keep it to one charge. What differs is what a retry that overlaps the first request hears. In the atomic design it waits, holding a database connection, for as long as the first request takes, and then gets the real answer. In the key-first design it is told at once, with <code>409</code> and <code>Retry-After</code>, that it came too early. The client has to send it again later, and that later retry gets the real answer.',
  'l4.tradeoff.p2.html': p =>
    `Key-first pays for the quick answer with a window between its two transactions. If the process dies after committing the key but before the charge, the row stays <code>in_progress</code> with nobody working on it, and every retry gets 409 until the row’s lease runs out (<code>locked_until</code>; ${p.isDefault === 'true' ? `${p.lease} here, the default` : `${p.lease} on this server, ${p.defaultLease} seconds by default`}). After that, the next request with the same key and the same body takes the row over and runs as the first. So key-first needs the lease and this takeover to recover. The atomic design has no such window: if the process dies, its single transaction rolls back, and the key disappears together with the charge.`,
  'l4.sqlite':
    'On the SQLite backend (the zero-setup default) the same thing happens, but the lock that makes B wait covers the whole database, not one key: every other write waits for A too. PostgreSQL locks only the entry of this one key in the unique index.',

  // ---- lesson 5 ---------------------------------------------------------
  'l5.title': '5. How long a key lives, and reusing one',
  'l5.p1': p =>
    `The server cannot keep every key forever, or the table would only grow. This one keeps a key for ${p.ttl}. The period is the API provider’s choice and should be documented; the specification does not fix it. Once the period is over, the key is forgotten, and a retry with it looks like a brand-new request.`,
  'l5.expire.title': 'An expired key, the purge, and a retry',
  'l5.expire.p.html':
    'Make a charge with a key and make the key expire right now (<code>POST /demo/keys/{key}/expire</code>, a shortcut that exists only in the demo). Then run one pass of the purge (<code>POST /demo/purge</code>, also demo only), and finally send the charge again with the same key.',
  'l5.expire.step1': 'Charge with a key',
  'l5.expire.step2': 'Expire the key now',
  'l5.expire.step3': 'Run the purge',
  'l5.expire.step4': 'Send the charge again with the same key',
  'l5.expire.verdict.ok.html': p =>
    `${Number(p.purged) === 0 ? 'The purge found nothing left to delete (the server’s own purge had already removed the row), and' : `The purge deleted <strong>${p.purged}</strong> expired key ${Number(p.purged) === 1 ? 'row' : 'rows'}, and`} the charge stayed. The retry after it went through as a new request: the table gained <strong>${p.n}</strong> charges. A key has to live longer than the client keeps retrying.`,
  'l5.expire.verdict.bad.html': p =>
    `Expected the purge to remove the expired key row and keep the charge, and the retry to make a second charge. Purged: ${p.purged}; key row still there: ${p.keyLeft}; charges after the purge: ${p.kept}; new charges: ${p.n} (last status ${p.status}).`,
  'l5.purge.p1.html':
    'Expiring a key does not delete its row. The row stays in <code>idempotency_keys</code>, marked expired, until the purge removes it. Even before that the server treats an expired row as if it were not there, so without step 3 the retry would have been a new charge just the same. The server runs the purge by itself, every {every} on this server (<code>PURGE_INTERVAL</code>, {defaultEvery} by default), and deletes expired key rows in batches of {batch} (<code>PURGE_BATCH</code>): short statements that never hold locks for long. It deletes key rows only; the charges stay.',
  'l5.purge.p2': p =>
    `The purge only tidies up. What decides is the retention, ${p.ttl} here: a client that keeps retrying for longer than that gets its late retries through as new charges. So the retention has to outlast every client’s retry window; making it longer costs nothing but more rows.`,
  'l5.reuse.title': 'The same key with a different request',
  'l5.reuse.p.html':
    'A key names one request. Sending the same key with a different amount is not a retry, so the server neither replays the old answer nor charges again: it refuses with <code>422</code>. To notice the difference it keeps a fingerprint of each request, a hash of its body, in the <code>fingerprint</code> column.',
  'l5.reuse.step1': 'Charge {amount} with a key',
  'l5.reuse.step2': 'Send {amount} with the same key',
  'l5.reuse.verdict.ok.html': p =>
    `The second request was refused with <code>${p.status}</code> (<code>${p.type}</code>). The table gained only <strong>${p.n}</strong> charge.`,
  'l5.reuse.verdict.bad.html': p => `Expected ${p.expectStatus} ${p.expectType} and 1 new charge; got ${p.status} ${p.type}, ${p.n} new charge(s).`,
  'l5.newkey.title': 'A new key for every attempt',
  'l5.newkey.p':
    'A key is made once per charge the client means to make, not once per attempt. This client makes a fresh key every time it sends, so the server has nothing linking the retry to the first attempt.',
  'l5.newkey.step1': 'Send with key #1 (the answer gets lost)',
  'l5.newkey.step2': 'Send again with a freshly made key #2',
  'l5.newkey.verdict.ok.html': p =>
    `Two different keys, <strong>${p.n}</strong> new charges: the duplicate got through.`,
  'l5.newkey.verdict.bad.html': p => `Expected 2 new charges; got ${p.n}.`,

  // ---- summary ----------------------------------------------------------
  'end.title': 'Summary',
  'end.1': 'A lost answer leaves the client unable to tell “not done” from “done”, so a plain retry can charge twice.',
  'end.2': 'Where you can, describe the end result (“set to 400”) rather than a change; PUT and DELETE work that way.',
  'end.3': 'Where you cannot, as with a new charge, the client sends one Idempotency-Key per intended charge and keeps it for every retry.',
  'end.4': 'The server registers the key under a unique constraint in the same statement as the charge, and stores the response in it to replay.',
  'end.5': 'A retry that overlaps the first request either waits for it and gets the same answer (atomic), or gets 409 at once and must retry later (key-first, which needs a lease to recover from a crash between its two transactions).',
  'end.6': 'Keys expire (an expired key already counts as absent; the purge deletes its row later), a reused key with a different body gets 422, and a new key per attempt defeats the whole scheme.',

  'footer.text': 'Every endpoint, status code and problem type of this API:',
  'footer.docs': 'API reference',

  // ---- experiment frame -------------------------------------------------
  'exp.steps': 'Steps',
  'exp.runAgain': 'Run this experiment again',
  'exp.idle': 'Press the first button to start.',
  'exp.next': p => `Next: step ${p.n}.`,
  'exp.running': 'Running…',
  'exp.busyElsewhere': 'Another experiment is running; its buttons are paused until it finishes.',
  'exp.diagram': 'What happened, step by step',
  'exp.diagramEmpty': 'The diagram is drawn as the requests go out and come back.',
  'exp.requests': 'Requests and responses',
  'exp.db': 'The database',
  'exp.dbWhen': p => `After the last request (${p.time}), read with GET /demo/state. Rows added in this run are marked “new”.`,
  'exp.dbNone': 'Nothing read yet.',
  'exp.error': p => `Could not talk to the API: ${p.message}`,
  'exp.resultTitle': 'Result',

  // ---- request cards ----------------------------------------------------
  'card.request': 'Request',
  'card.response': 'Response',
  'card.waiting': 'waiting for the answer…',
  'card.noResponse': 'No response.',
  'card.browserAdds': 'The browser also adds headers such as Host and Origin.',
  'card.formatted': 'JSON bodies are shown indented for reading.',
  'card.after': 'Database after this request',
  'card.elapsedLabel': 'Time until the answer',
  'announce.response': 'Request {tag} answered {status} after {ms} ms.',
  'card.explain.lost': 'The server committed the charge, but the answer never reached the client. All it got was a 504, which does not say whether it was charged.',
  'card.explain.created': 'A new charge was created and committed.',
  'card.explain.replayed': 'No new charge: the server knew this key and sent back the response it had stored (note Idempotent-Replayed: true).',
  'card.explain.reused': 'Refused: this key was already used for a different request.',
  'card.explain.inFlight': 'Refused for now: the first request with this key is still being processed. This request charged nothing; send it again with the same key after Retry-After seconds.',
  'card.explain.purged': p =>
    p.n === 0
      ? 'The purge found no expired key rows to delete (the server’s own purge may have removed them already).'
      : `The purge deleted ${plural(p.n, 'expired key row', 'expired key rows')}. Charges are never deleted.`,
  'card.explain.expired': 'The key is now marked as expired.',
  'card.explain.other': p => `Answered ${p.status}.`,
  'card.explain.failed': p => `The request failed before any answer: ${p.message}`,

  // ---- tables -----------------------------------------------------------
  'tbl.charges': 'charges',
  'tbl.keys': 'idempotency_keys',
  'tbl.unguarded': 'unguarded_keys (demo only: no unique constraint)',
  'tbl.empty': 'empty',
  'tbl.count': p => plural(p.n, 'row', 'rows'),
  'tbl.new': 'new',
  'tbl.expired': 'expired',
  'tbl.leaseLive': 'lease live',
  'tbl.leaseOver': 'lease over',
  'col.id': 'id',
  'col.amount': 'amount',
  'col.description': 'description',
  'col.created_at': 'created_at',
  'col.key': 'key',
  'col.status': 'status',
  'col.fingerprint': 'fingerprint',
  'col.response_status': 'response',
  'col.charge_id': 'charge_id',
  'col.expires_at': 'expires_at',
  'col.locked_until': 'locked_until',
  'summary.db': p => `${plural(p.charges, 'charge', 'charges')}, ${plural(p.keys, 'key', 'keys')}`,
  'summary.unguarded': p => `, ${plural(p.n, 'unguarded key row', 'unguarded key rows')}`,

  // ---- request titles ---------------------------------------------------
  'title.first': 'First attempt',
  'title.retryNoKey': 'Retry, without a key',
  'title.retrySameKey': 'Retry with the same key',
  'title.concurrent': 'Sent at the same moment, same key',
  'title.firstHeld': 'First attempt, keeps its transaction open {s} s',
  'title.retryWhileRunning': 'Retry {after} s later, same key',
  'title.firstHeldKeyFirst': 'First attempt, keeps transaction 2 open {s} s',
  'title.retryLater': 'Retry after A has finished, same key',
  'title.purge': 'Run the purge (one pass)',
  'title.expire': 'Expire the key (demo shortcut)',
  'title.retryAfterPurge': 'Retry after the purge, same key',
  'title.charge': 'Charge {amount} with a key',
  'title.otherAmount': 'Same key, now {amount}',
  'title.key1': 'First attempt, key #1',
  'title.key2': 'Retry with a new key #2',

  // ---- diagram ----------------------------------------------------------
  'lane.client': 'Client',
  'lane.api': 'API',
  'lane.db': 'DB',
  'd.callCharge': 'POST /charges',
  'd.amount': p => `amount ${p.amount}`,
  'd.withKey': p => `Idempotency-Key: ${p.key}`,
  'd.noKey': 'no Idempotency-Key',
  'd.insertCharge': p => `record a ${p.amount} charge, COMMIT`,
  'd.insertKeyNew': p => `register key ${p.key} → it is new`,
  'd.insertKeyTaken': p => `register key ${p.key} → already there`,
  'd.chargeAndSave': p => `the key with its 201 and a ${p.amount} charge, written together (one statement on PostgreSQL), committed`,
  'd.readStored': 'read the stored response',
  'd.lost': '201 is lost on the way; the client gets only a 504',
  'd.reply': p => `${p.status} · ${p.ms} ms`,
  'd.replyReplayed': p => `201 (Idempotent-Replayed) · ${p.ms} ms`,
  'd.fingerprintDiffers': 'key found, but this request’s fingerprint differs',
  'd.select': p => `SELECT key ${p.key} → none`,
  'd.pause': 'both pause {ms} ms',
  'd.insertUnguarded': p => `INSERT key (no constraint) and a ${p.amount} charge, COMMIT`,
  'd.raceLoser': p => `register key ${p.key} → taken by ${p.other} (waits if ${p.other} has not committed yet)`,
  'd.uncommitted': p => `key ${p.key} with its 201 and the charge, written together (not committed yet)`,
  'd.holdOpen': p => `keeps its transaction open for ${p.s} s`,
  'd.mustWait': p => `register key ${p.key} → must wait for ${p.other}`,
  'd.commitNow': 'COMMIT (the {s} s are over)',
  'd.unblocked': p => `${p.other} committed → key taken → read the stored response`,
  'd.callExpire': p => `POST /demo/keys/…/expire`,
  'd.markExpired': p => `mark key ${p.key} as expired`,
  'd.kfRegister': p => `transaction 1: register key ${p.key} as in_progress (lease ${p.s} s), COMMIT`,
  'd.kfCharge': 'transaction 2 begins: the charge is being worked on (nothing written yet)',
  'd.kfHold': p => `the work takes ${p.s} s`,
  'd.kfRegisterB': p => `register key ${p.key}`,
  'd.kfInProgress': p => `${p.other}’s row is committed: in_progress, lease live → no waiting`,
  'd.kfCommit': 'transaction 2: the charge and the 201 in the key row (completed), one statement, COMMIT (the {s} s are over)',
  'd.callPurge': 'POST /demo/purge',
  'd.purgeDelete': 'DELETE expired key rows, in batches (PURGE_BATCH, {batch})',
  'd.purgedRows': p => `${p.n === 1 ? '1 key row' : `${p.n} key rows`} deleted; charges untouched`,
  'd.expiredIsNew': p => `register key ${p.key} → the old record expired, so it counts as new`,
  'd.purgedIsNew': p => `register key ${p.key} → no row any more (purged), so it is new`,
  'd.countNote': p => `${p.n === 1 ? '1 charge' : `${p.n} charges`} in the table`,
  'd.failed': p => `request failed: ${p.message}`,
  'd.gap': p => `${p.s} s pass`,
  'd.waitingLive': p => `${p.ms} ms…`,
  'tag.request': p => `Request ${p.tag}`,
};

const ja = {
  'page.title': '再送したのに、なぜ二重に課金されなかったのか — charges',
  'skip': 'レッスンへ移動',
  'brand.sub': '触って確かめる決済 API',
  'lang.switch': 'English',
  'lang.switchLabel': 'このページを英語で表示',
  'reset': 'デモデータをリセット',
  'reset.busy': 'リセット中…',
  'reset.done': 'デモデータをリセットしました。テーブルは空です。',
  'reset.failed': 'リセットに失敗しました: {message}',
  'status.loading': 'API に接続しています…',
  'status.backend': 'データベース: {backend} ・ 既定のモード: {mode}',
  'status.db': p => `現在のデータベース: 課金 ${p.charges} 件、キー ${p.keys} 件`,
  'status.offline': 'このページのサーバーにある API に接続できません。サーバーは起動していますか。',

  'intro.title': '再送したのに、なぜ二重に課金されなかったのか',
  'intro.lead.html':
    'HTTP の<strong>冪等キー</strong>（Idempotency-Key）を、手を動かして確かめるページです。下のボタンを押すと、このページの裏で動いている決済 API に本物のリクエストが送られ、その直後のデータベースの中身が表示されます。',
  'intro.p1.html':
    'ネットショップのサーバーが、決済 API に 1,000 円の課金を頼んだとします。返ってきたのは <code>504 Gateway Timeout</code> でした。お客様への課金は済んだのでしょうか。タイムアウトだけでは分かりません。リクエストが API まで届かなかったのかもしれませんし、処理は終わっていて返事だけが帰り道で消えたのかもしれません。以下のレッスンでは、そのまま送り直すと何がまずいのか、そして冪等キーを付けるとなぜ安心して送り直せるのかを順に確かめます。',
  'intro.how.title': 'このページの使い方',
  'intro.how.html':
    '各実験では、番号の付いたボタンを順に押してください。リクエストのたびに、<strong>シーケンス図</strong>（クライアント・API・DB）、<strong>送ったリクエストと返ってきたレスポンスそのもの</strong>、<strong>かかった時間</strong>、その直後の<strong>データベースのテーブル</strong>が表示されます。ページ上部の<strong>「デモデータをリセット」</strong>でテーブルを空にできるので、実験ごとにまっさらな状態から始められます。',
  'toc.title': 'レッスン',
  'toc.l1': '1. キーなしで送り直すと',
  'toc.l2': '2. もともと繰り返しに強い操作',
  'toc.l3': '3. 冪等キー',
  'toc.l4': '4. 1 通目の処理中に届いた再送',
  'toc.l5': '5. キーの寿命と使い回し',
  'toc.end': 'まとめ',

  'l1.title': '1. キーなしで送り直すと',
  'l1.p1': '返事が来ないとき、クライアントにできるのは「もう一度送る」か「諦める」かのどちらかです。しかし、クライアントには見分けられない 2 つの場合があり、どちらを選んでも片方の場合でうまくいきません。',
  'l1.table.caption': 'クライアントから見えない事情ごとの結果',
  'l1.table.corner': 'クライアントが…',
  'l1.table.lostReq': 'リクエストが届いていなかった',
  'l1.table.lostRes': '処理は済み、返事だけが消えた',
  'l1.table.retry': 'もう一度送る',
  'l1.table.giveUp': '諦める',
  'l1.table.retryLostReq': '課金 1 回で問題なし',
  'l1.table.retryLostRes': '課金が 2 回になる',
  'l1.table.giveUpLostReq': '課金されず、お客様に頼み直してもらう必要がある',
  'l1.table.giveUpLostRes': '支払いは済んだのに、お店は失敗したと思い込む',
  'l1.p2.html':
    '多くのクライアントは送り直すほうを選びます。この実験の 1 通目は、きちんと処理されてコミットまで終わります。ところがデモ用のサーバーはその返事を捨て、タイムアウトしたゲートウェイのように <code>504</code> を返します（ヘッダ <code>Demo-Fault: lose-response</code>）。続いてクライアントは、同じ本文をキー<strong>なし</strong>で送り直します。',
  'l1.step1': '課金を送る（返事は失われる）',
  'l1.step2': '同じリクエストをもう一度送る（キーなし）',
  'l1.verdict.ok.html': p =>
    `お客様が頼んだのは 1,000 円の課金 <strong>1 回</strong>なのに、テーブルの課金は <strong>${p.n} 件</strong>増えました。2 通目には再送だと分かる手がかりが何もないので、サーバーはもう一度課金しました。`,
  'l1.verdict.bad.html': p => `課金が 2 件増えるはずでしたが、増えたのは ${p.n} 件でした。`,
  'l1.p3': 'クライアントには 1 通目が通ったかどうかを確かめる手段がありません。再送を見分ける役目は、API の側が引き受けることになります。',

  'l2.title': '2. もともと繰り返しに強い操作',
  'l2.p1.html':
    '書き方しだいで、何度繰り返しても困らない操作があります。残高 500 の口座で考えてみましょう。「残高を 100 <strong>減らす</strong>」は変化を伝える書き方で、「残高を 400 <strong>にする</strong>」は行き着く結果を伝える書き方です。それぞれ 3 回ずつ適用してみてください。',
  'l2.localNote': 'このレッスンはブラウザの中だけで動き、リクエストは送りません。',
  'l2.decrease': '残高を 100 減らす',
  'l2.set': '残高を 400 にする',
  'l2.applyOnce': p => `もう 1 回適用する（${p.done}/3）`,
  'l2.applyDone': '3 回適用しました',
  'l2.startOver': '500 からやり直す',
  'l2.after': p =>
    p.done === 0
      ? 'どちらも 500 から始まります。'
      : `${p.done} 回適用した結果: 「減らす」は ${p.dec}、「にする」は ${p.set}。`,
  'l2.p2.html':
    '「400 にする」は、まったく同じ要求を繰り返す限り、何回届いても同じ残高に落ち着きます。HTTP にも同じ線引きがあります。RFC 9110 は、同じリクエストを何回送っても、サーバーに意図される効果が 1 回送ったときと変わらないメソッドを<strong>冪等</strong>と呼びます。PUT と DELETE、それに状態の変更を求めない <em>safe</em> なメソッド（GET・HEAD・OPTIONS・TRACE）が冪等で、POST は冪等ではありません。',
  'l2.methods.caption': 'RFC 9110 における HTTP メソッド',
  'l2.methods.method': 'メソッド',
  'l2.methods.what': '求めること',
  'l2.methods.idem': '冪等か',
  'l2.methods.get': 'リソースを読む。何も変えない（safe）。',
  'l2.methods.put': 'この URL のリソースを本文の内容にする。',
  'l2.methods.delete': 'この URL のリソースを消す。',
  'l2.methods.post': '本文を処理する。送るたびに新しいものができることもある。',
  'l2.yes': 'はい',
  'l2.no': 'いいえ',
  'l2.p3': '揃っていなければならないのは意図された効果で、返事ではありません。同じ注文を 2 回削除してみましょう。',
  'l2.delete': 'DELETE /orders/42 を送る',
  'l2.recreate': '注文 42 を元に戻す',
  'l2.orderExists': '注文 42 はあります。',
  'l2.orderGone': '注文 42 はありません。',
  'l2.deleteLine': p => `DELETE /orders/42 → ${p.status} ・ その後: 注文 42 は無い`,
  'l2.p4.html':
    '2 回目の返事は <code>204</code> ではなく <code>404</code> ですが、呼び出した側が望んだ「注文 42 が無い状態」はどちらでも同じなので、DELETE は冪等のままです。ログの行のような副作用が回数分増えるのも構いません。一方、課金の作成はこの形に言い換えられません。<code>POST /charges</code> は送るたびに、まだどこにも無い課金を新しく作るので、クライアントが「この状態にして」と指せる相手がないのです。そこで冪等キーの出番になります。',

  'l3.title': '3. 冪等キー',
  'l3.p1.html':
    'クライアントは、行いたい課金 1 件ごとに一意な値（ランダムな UUID）を作り、<code>Idempotency-Key</code> ヘッダに入れて送ります。その課金を送り直すときは、毎回同じ値を使います。サーバーはキーを課金と同じデータベースのトランザクションで記録し、返した応答も一緒に保存します。同じキーがもう一度届いたら、課金はせず、保存しておいた応答を返します。',
  'l3.retry.title': '同じように返事が失われても、今度はキー付き',
  'l3.retry.p': 'レッスン 1 と同じく 1 通目の返事は失われますが、今回は 2 通とも同じキーを付けて送ります。',
  'l3.retry.step1': 'キー付きで課金を送る（返事は失われる）',
  'l3.retry.step2': '同じキーでもう一度送る',
  'l3.retry.verdict.ok.html': p =>
    `テーブルの課金は <strong>${p.n} 件</strong>だけ増えました。再送には <code>Idempotent-Replayed: true</code> 付きの <code>201</code> が返り、その id <code>${p.id}</code> は 1 通目が保存した課金の id と同じです。`,
  'l3.retry.verdict.bad.html': p =>
    `新しい課金 1 件と、保存済みの id を持つ再生された 201 を期待していました。実際は課金 ${p.n} 件、replayed: ${p.replayed}、id の一致: ${p.same} でした。`,
  'l3.p2':
    '二重課金を防いでいるのはキーそのもので、応答の保存は冪等性の条件ではありません。これはクライアントへの心配りです。クライアントには自分の送信が初回か再送かを見分けられないので、どちらでも同じ応答が返れば、処理を分けずに済みます。',
  'l3.race.title': 'なぜ一意制約なのか',
  'l3.race.p1.html':
    '素直に作るなら「キーを探し、無ければ課金してからキーを書き込む」でしょう。問題は、探してから書き込むまでの隙間です。同じキーの 2 通が同時に届くと、両方が探し、両方とも何も見つけられず、両方が課金します。デモの <code>Demo-Mode: check-then-insert</code> はまさにこの動きをします。隙間に入りやすいよう検索と書き込みの間で {pause} ms 待ち、キーを入れるテーブル <code>unguarded_keys</code> には一意制約がありません。',
  'l3.naive.title': '同時に 2 通: 探してから書き込む',
  'l3.naive.step1': '同じキーの 2 通を同時に送る（check-then-insert）',
  'l3.naive.verdict.ok.html': p =>
    `2 通ともキーを見つけられず、どちらも課金しました。課金は <strong>${p.n} 件</strong>増え、<code>unguarded_keys</code> には同じキーの行が <strong>${p.rows} 行</strong>あります。`,
  'l3.naive.verdict.bad.html': p => `課金が 2 件増えるはずでしたが、${p.n} 件でした（このキーの unguarded_keys の行: ${p.rows}）。`,
  'l3.race.p2.html':
    '本来のモードでは、まず<strong>キーを先に</strong>、<code>UNIQUE</code> 制約の付いた列へ書き込みます（<code>INSERT … ON CONFLICT DO NOTHING</code>）。データベースは 2 行のうち 1 行しか受け入れません。もう一方のリクエストはキーが既にあることを知り、保存された応答を返します。',
  'l3.guarded.title': '同時に 2 通: 一意制約あり',
  'l3.guarded.step1': '同じキーの 2 通を同時に送る（一意制約あり）',
  'l3.guarded.verdict.ok.html': p =>
    `課金は <strong>${p.n} 件</strong>だけ増えました。片方が課金し、もう片方は保存済みの <code>201</code>（<code>Idempotent-Replayed: true</code>）を同じ id で受け取りました。`,
  'l3.guarded.verdict.bad.html': p => `新しい課金 1 件と再生 1 回を期待していましたが、課金 ${p.n} 件、再生 ${p.replays} 回でした。`,

  'l4.title': '4. 1 通目の処理中に届いた再送',
  'l4.p1.html':
    'ここまでの再送は、1 通目が終わった後に届いていました。では、1 通目がまだ処理している最中に再送が届いたらどうなるでしょう。この実験の 1 通目（A）は、課金をコミットする前にサーバーの中で {s} 秒間止まります（<code>Demo-Fault: delay-commit={ms}</code>）。A を送ってから {after} 秒後に、クライアントは同じキー・同じ本文で再送（B）を送ります。B が何を受け取るかは、サーバーがキーをどこで記録するかで変わります。設計を選んで、両方を試してみてください。',
  'l4.mode.legend': '試す設計',
  'l4.mode.atomicHint': 'キー・課金・保存する応答を 1 つの文で書く',
  'l4.mode.keyFirstHint': 'キーだけを先にコミットし、課金はその後',
  'l4.p2.atomic.html':
    '<strong>atomic</strong> では、キーの行・課金・保存する応答をまとめて書き込みます。サーバーは課金の id と <code>201</code> を先に決めるので、PostgreSQL ではこれがすべて<strong>1 つの SQL 文</strong>になり、トランザクションと同じく、全部コミットされるか何も残らないかのどちらかです。ここではデモがその文のトランザクションを開いたままにするので、A のキーの行は A がコミットするまで他からは見えません。それでも一意制約の検査はまだコミットされていない行も対象にするため、同じキーを登録しようとする B は、A がコミットかロールバックするまで<strong>待たされます</strong>。A がコミットすると B はキーを見つけ、保存済みの <code>201</code> を返します。B にはおよそ {wait} 秒かかるはずです。PostgreSQL 17 で同じ 2 つの INSERT を計ったときは 4009 ms でした。',
  'l4.p2.keyFirst.html':
    '<strong>key-first</strong> では、A は 2 つのトランザクションを使います。1 つ目はキーをリース付きの <code>in_progress</code> として登録し、すぐにコミットします。今回時間がかかるのは 2 つ目で、{s} 秒かけて処理した後、課金の記録とキーの行の完了を 1 つの文で書き込みます。そのため B は「処理中」と書かれた確定済みの行を見つけます。サーバーは待たずに、数ミリ秒で <code>409 Conflict</code>（<code>{type}</code>）を <code>Retry-After: {retryAfter}</code> 付きで返し、B では何も課金されません。ページは B の返事の直後にテーブルを読むので、A がまだ処理中のうちにその行を確かめられます。A が終わると、ページは同じリクエストをもう一度（C）送ります。C は保存済みの <code>201</code> を受け取ります。',
  'l4.backend': p =>
    `このサーバーは ${p.backend} で動いていて、既定のモードは「${p.serverMode}」です。この実験は「${p.mode}」モードで動かすので、送るリクエストにはすべて Demo-Mode: ${p.mode} が付きます。`,
  'l4.step1.atomic': 'A を送り（{s} 秒保持）、{after} 秒後に同じキーで B を送る',
  'l4.step1.keyFirst': 'A を送り（{s} 秒保持）、{after} 秒後に同じキーで B を、A の完了後に C を送る',
  'l4.verdict.ok.html': p =>
    `B は <strong>${p.ms} ms</strong> 待たされた後、<code>Idempotent-Replayed: true</code> 付きで保存済みの <code>201</code> を受け取り、id も A の課金と同じでした。課金は <strong>${p.n} 件</strong>だけ増えました。`,
  'l4.verdict.bad.html': p =>
    `B が約 ${p.expectMs} ms 待って再生された 201 を受け取り、課金が 1 件増えることを期待していました。実際は B が ${p.ms} ms、ステータス ${p.status}、replayed: ${p.replayed}、増えた課金 ${p.n} 件でした。`,
  'l4.kf.verdict.ok.html': p =>
    `B は <strong>${p.ms} ms</strong> で <code>409 Conflict</code>（<code>Retry-After: ${p.retryAfter}</code>）を受け取りました。キーの行は <code>in_progress</code> として確定済みだったので、サーバーは A を待たなかったのです。A が終わった後、同じキーの C は <code>Idempotent-Replayed: true</code> 付きで保存済みの <code>201</code> を受け取り、id も A の課金と同じでした。課金は <strong>${p.n} 件</strong>だけ増えました。`,
  'l4.kf.verdict.bad.html': p =>
    `B が ${p.maxMs} ms 以内に 409 idempotency-key-in-flight を受け取り、その直後のキーの行が in_progress で、C が A と同じ id の再生された 201 を受け取り、課金が 1 件だけ増えることを期待していました。実際は B: ${p.bStatus}（${p.ms} ms）、B 直後のキーの行: ${p.rowStatus}、C: ${p.cStatus}、replayed: ${p.replayed}、id の一致: ${p.same}、増えた課金 ${p.n} 件でした。`,
  'l4.p3':
    'B が待ちきれずに諦めても、409 を受けたところでやめても、クライアントは課金されたかどうか分からないままです。冪等キーが約束するのは「課金は多くても 1 回」までで、答えを返すことまでは約束しません。後で同じキーを送り直せば、保存された答えを受け取れます。',
  'l4.tradeoff.title': '待たせるか、すぐ 409 を返すか',
  'l4.tradeoff.p1.html':
    'どちらの設計でも、課金は 1 回に収まります。違うのは、1 通目と重なった再送が何を受け取るかです。atomic では、再送は 1 通目が終わるまでデータベースの接続を握ったまま待ち、終わったところで本当の答えを受け取ります。key-first では、<code>409</code> と <code>Retry-After</code> で「まだ早い」とすぐに知らされます。クライアントは後でもう一度送る必要があり、本当の答えはその再送で受け取ります。',
  'l4.tradeoff.p2.html': p =>
    `key-first は、すぐに答えられる代わりに、2 つのトランザクションの間に隙間を抱えます。キーをコミットした後、課金の前にプロセスが落ちると、その行は誰も処理していないのに <code>in_progress</code> のまま残り、再送は行のリース（<code>locked_until</code>。${p.isDefault === 'true' ? `このサーバーでは既定どおり ${p.lease}` : `このサーバーでは ${p.lease}、既定は ${p.defaultLease} 秒`}）が切れるまで 409 を受け取り続けます。リースが切れた後は、同じキー・同じ本文で届いた次のリクエストがその行を引き継ぎ、1 通目として処理します。つまり key-first には、リースとこの引き継ぎという回収の仕組みが欠かせません。atomic にはこの隙間がありません。プロセスが落ちれば 1 つしかないトランザクションがロールバックされ、キーも課金と一緒に消えるからです。`,
  'l4.sqlite':
    'SQLite バックエンド（設定不要の既定）でも同じことが起きますが、B を待たせるロックはキー 1 つではなくデータベース全体にかかり、ほかの書き込みもすべて A を待ちます。PostgreSQL がロックするのは、一意インデックスのこのキーの項目だけです。',

  'l5.title': '5. キーの寿命と使い回し',
  'l5.p1': p =>
    `サーバーはすべてのキーを永遠に持っておけません。テーブルが増える一方になるからです。このサーバーはキーを ${p.ttl} 保持します。期間は API を提供する側が決めて文書にするもので、仕様では決まっていません。期間が過ぎるとキーは忘れられ、そのキーでの再送は新しいリクエストと見分けがつかなくなります。`,
  'l5.expire.title': '期限切れのキー、パージ、そして再送',
  'l5.expire.p.html':
    'キー付きで課金し、そのキーを今すぐ期限切れにします（<code>POST /demo/keys/{key}/expire</code>。デモ専用の近道です）。続いて期限切れのキーを消すパージを 1 回実行し（<code>POST /demo/purge</code>。これもデモ専用）、最後に同じキーで課金をもう一度送ります。',
  'l5.expire.step1': 'キー付きで課金する',
  'l5.expire.step2': 'キーを今すぐ期限切れにする',
  'l5.expire.step3': 'パージを実行する',
  'l5.expire.step4': '同じキーで課金をもう一度送る',
  'l5.expire.verdict.ok.html': p =>
    `${Number(p.purged) === 0 ? 'パージが消す行はもう残っていませんでした（サーバー自身の定期パージが先に消していました）。' : `パージは期限切れのキーの行を <strong>${p.purged} 行</strong>削除しました。`}課金は残っています。その後の再送は新しいリクエストとして通り、課金は <strong>${p.n} 件</strong>増えました。キーの保持期間は、クライアントが送り直しを続ける期間より長くなければなりません。`,
  'l5.expire.verdict.bad.html': p =>
    `パージが期限切れのキーの行を消して課金は残し、その後の再送で課金が 2 件目になることを期待していました。実際は削除 ${p.purged} 行、キーの行が残っている: ${p.keyLeft}、パージ後の課金 ${p.kept} 件、増えた課金 ${p.n} 件（最後のステータス ${p.status}）でした。`,
  'l5.purge.p1.html':
    '期限切れにしても、キーの行はすぐには消えません。パージが削除するまでは、期限切れの印が付いたまま <code>idempotency_keys</code> に残ります。それでもサーバーは期限切れの行を無いものとして扱うので、手順 3 を飛ばして再送しても、やはり新しい課金になっていました。パージはサーバーが自分で定期的に（このサーバーでは {every}ごと、<code>PURGE_INTERVAL</code>、既定は {defaultEvery}ごと）実行し、期限切れのキーの行を {batch} 行ずつ（<code>PURGE_BATCH</code>）削除します。1 回の文が短いので、ロックを長く握ることはありません。消すのはキーの行だけで、課金は残ります。',
  'l5.purge.p2': p =>
    `パージは後片付けにすぎません。重複を防げる範囲を決めるのは保持期間（このサーバーでは ${p.ttl}）で、クライアントがそれより長く送り直しを続けると、遅れて届いた再送は新しい課金として通ってしまいます。保持期間はどのクライアントの再試行期間よりも長くとる必要があり、長くしても増えるのは行の数だけです。`,
  'l5.reuse.title': '同じキーで別のリクエスト',
  'l5.reuse.p.html':
    'キーは 1 つのリクエストに付ける名前です。同じキーで金額を変えて送るのは再送ではないので、サーバーは前の応答を返すことも、新たに課金することもせず、<code>422</code> で断ります。違いに気付けるよう、サーバーはリクエスト本文のハッシュ（指紋）を <code>fingerprint</code> 列に残しています。',
  'l5.reuse.step1': 'キー付きで {amount}を課金する',
  'l5.reuse.step2': '同じキーで {amount}を送る',
  'l5.reuse.verdict.ok.html': p =>
    `2 通目は <code>${p.status}</code>（<code>${p.type}</code>）で断られました。課金は <strong>${p.n} 件</strong>しか増えていません。`,
  'l5.reuse.verdict.bad.html': p => `${p.expectStatus} ${p.expectType} と課金 1 件を期待していましたが、${p.status} ${p.type}、課金 ${p.n} 件でした。`,
  'l5.newkey.title': '送るたびに新しいキー',
  'l5.newkey.p':
    'キーは、行いたい課金 1 件につき 1 回作るもので、送信 1 回ごとに作るものではありません。このクライアントは送るたびに新しいキーを作るので、サーバーには再送と 1 通目を結び付ける手がかりがありません。',
  'l5.newkey.step1': 'キー #1 で送る（返事は失われる）',
  'l5.newkey.step2': '新しく作ったキー #2 で送り直す',
  'l5.newkey.verdict.ok.html': p =>
    `キーが 2 つ別々なので、課金も <strong>${p.n} 件</strong>増えました。重複はそのまま通り抜けています。`,
  'l5.newkey.verdict.bad.html': p => `課金が 2 件増えるはずでしたが、${p.n} 件でした。`,

  'end.title': 'まとめ',
  'end.1': '返事が失われると、クライアントには「処理されていない」と「処理された」の区別が付かず、ただ送り直すだけでは二重に課金されることがある。',
  'end.2': 'できるなら、変化（「100 減らす」）ではなく行き着く結果（「400 にする」）で要求を書く。PUT と DELETE はこの考え方のメソッド。',
  'end.3': '新しい課金のようにそれができない場合は、クライアントが意図した課金 1 件ごとに Idempotency-Key を 1 つ作り、再送にも同じ値を使う。',
  'end.4': 'サーバーはキーを課金と同じ文で一意制約の下に登録し、応答もそこに保存しておいて再送に返す。',
  'end.5': '1 通目と重なった再送は、1 通目の完了を待って同じ応答を受け取る（atomic）か、すぐに 409 を受けて後で送り直す（key-first）。key-first では、2 つのトランザクションの間で落ちた場合に備えて、リースによる回収が要る。',
  'end.6': 'キーには期限がある（期限切れのキーはその時点で無いものとして扱われ、行は後でパージが消す）。同じキーを別の本文で使えば 422 になり、送るたびに新しいキーを作ると仕組み全体が働かない。',

  'footer.text': 'この API のエンドポイント、ステータスコード、エラーの種類（problem type）の一覧:',
  'footer.docs': 'API リファレンス',

  'exp.steps': '手順',
  'exp.runAgain': 'この実験をもう一度行う',
  'exp.idle': '最初のボタンを押すと始まります。',
  'exp.next': p => `次は手順 ${p.n} です。`,
  'exp.running': '実行中…',
  'exp.busyElsewhere': '別の実験が実行中です。終わるまでこのボタンは押せません。',
  'exp.diagram': '何が起きたか（順を追って）',
  'exp.diagramEmpty': 'リクエストを送り、返事が届くのに合わせて図を描きます。',
  'exp.requests': 'リクエストとレスポンス',
  'exp.db': 'データベース',
  'exp.dbWhen': p => `最後のリクエストの後（${p.time}）に GET /demo/state で読んだ内容です。この実行で増えた行には「新規」と付きます。`,
  'exp.dbNone': 'まだ読んでいません。',
  'exp.error': p => `API と通信できませんでした: ${p.message}`,
  'exp.resultTitle': '結果',

  'card.request': 'リクエスト',
  'card.response': 'レスポンス',
  'card.waiting': '返事を待っています…',
  'card.noResponse': 'レスポンスはありません。',
  'card.browserAdds': 'このほか、ブラウザが Host や Origin などのヘッダを付け足します。',
  'card.formatted': 'JSON の本文は読みやすいよう字下げして表示しています。',
  'card.after': 'このリクエストの直後のデータベース',
  'card.elapsedLabel': '返事までの時間',
  'announce.response': 'リクエスト {tag} に {status} が返りました（{ms} ms）。',
  'card.explain.lost': 'サーバーは課金をコミットしましたが、その返事はクライアントに届きませんでした。届いたのは 504 だけで、これでは課金されたかどうか分かりません。',
  'card.explain.created': '新しい課金が作られ、コミットされました。',
  'card.explain.replayed': '課金は増えていません。サーバーはこのキーを覚えていて、保存しておいた応答を返しました（Idempotent-Replayed: true に注目）。',
  'card.explain.reused': '断られました。このキーは別のリクエストで使用済みです。',
  'card.explain.inFlight': 'いまは受け付けられません。このキーの 1 通目がまだ処理中です。このリクエストでは何も課金されていません。Retry-After の秒数だけ待ってから、同じキーで送り直してください。',
  'card.explain.purged': p =>
    p.n === 0
      ? '削除する期限切れのキーはありませんでした（サーバー自身の定期パージが先に消したのかもしれません）。'
      : `パージが期限切れのキーの行を ${p.n} 行削除しました。課金が消されることはありません。`,
  'card.explain.expired': 'キーが期限切れの扱いになりました。',
  'card.explain.other': p => `${p.status} が返りました。`,
  'card.explain.failed': p => `返事が来る前にリクエストが失敗しました: ${p.message}`,

  'tbl.charges': 'charges（課金）',
  'tbl.keys': 'idempotency_keys（冪等キー）',
  'tbl.unguarded': 'unguarded_keys（デモ専用・一意制約なし）',
  'tbl.empty': '空',
  'tbl.count': p => `${p.n} 行`,
  'tbl.new': '新規',
  'tbl.expired': '期限切れ',
  'tbl.leaseLive': 'リース有効',
  'tbl.leaseOver': 'リース切れ',
  'summary.db': p => `課金 ${p.charges} 件、キー ${p.keys} 件`,
  'summary.unguarded': p => `、unguarded_keys ${p.n} 行`,

  'title.first': '1 通目',
  'title.retryNoKey': '再送（キーなし）',
  'title.retrySameKey': '再送（同じキー）',
  'title.concurrent': '同じキーで同時に送信',
  'title.firstHeld': '1 通目（トランザクションを {s} 秒保持）',
  'title.retryWhileRunning': '{after} 秒後の再送（同じキー）',
  'title.firstHeldKeyFirst': '1 通目（2 つ目のトランザクションを {s} 秒保持）',
  'title.retryLater': 'A の完了後の再送（同じキー）',
  'title.purge': 'パージを 1 回実行する',
  'title.expire': 'キーを期限切れにする（デモ専用）',
  'title.retryAfterPurge': 'パージ後の再送（同じキー）',
  'title.charge': 'キー付きで {amount} を課金',
  'title.otherAmount': '同じキーで {amount}',
  'title.key1': '1 通目（キー #1）',
  'title.key2': '新しいキー #2 で再送',

  'lane.client': 'クライアント',
  'lane.api': 'API',
  'lane.db': 'DB',
  'd.callCharge': 'POST /charges',
  'd.amount': p => `金額 ${p.amount}`,
  'd.withKey': p => `Idempotency-Key: ${p.key}`,
  'd.noKey': 'Idempotency-Key なし',
  'd.insertCharge': p => `${p.amount} の課金を記録して COMMIT`,
  'd.insertKeyNew': p => `キー ${p.key} を登録 → 初めてのキー`,
  'd.insertKeyTaken': p => `キー ${p.key} を登録 → 登録済み`,
  'd.chargeAndSave': p => `201 付きのキーと ${p.amount} の課金をまとめて書き込み（PostgreSQL では 1 つの文）、確定`,
  'd.readStored': '保存済みの応答を読む',
  'd.lost': '201 は途中で失われ、クライアントには 504 だけが届く',
  'd.reply': p => `${p.status} ・ ${p.ms} ms`,
  'd.replyReplayed': p => `201（Idempotent-Replayed）・ ${p.ms} ms`,
  'd.fingerprintDiffers': 'キーはあるが、リクエストの指紋が違う',
  'd.select': p => `キー ${p.key} を SELECT → 無し`,
  'd.pause': '2 通とも {ms} ms 待つ',
  'd.insertUnguarded': p => `キーを INSERT（制約なし）、${p.amount} の課金を記録して COMMIT`,
  'd.raceLoser': p => `キー ${p.key} を登録 → ${p.other} が登録済み（${p.other} が未確定ならコミットまで待つ）`,
  'd.uncommitted': p => `キー ${p.key} と 201、課金をまとめて書き込む（まだ未確定）`,
  'd.holdOpen': p => `トランザクションを ${p.s} 秒開いたまま`,
  'd.mustWait': p => `キー ${p.key} を登録 → ${p.other} の確定待ち`,
  'd.commitNow': 'COMMIT（{s} 秒が経過）',
  'd.unblocked': p => `${p.other} が確定 → キーは登録済み → 保存済みの応答を読む`,
  'd.callExpire': p => `POST /demo/keys/…/expire`,
  'd.markExpired': p => `キー ${p.key} を期限切れにする`,
  'd.kfRegister': p => `トランザクション 1: キー ${p.key} を in_progress で登録（リース ${p.s} 秒）して COMMIT`,
  'd.kfCharge': 'トランザクション 2 開始: 課金を処理中（まだ何も書いていない）',
  'd.kfHold': p => `処理に ${p.s} 秒かかる`,
  'd.kfRegisterB': p => `キー ${p.key} を登録`,
  'd.kfInProgress': p => `${p.other} の行は確定済み: in_progress、リース有効 → 待たない`,
  'd.kfCommit': 'トランザクション 2: 課金と、キーの行への 201 の保存（completed）を 1 つの文で行い COMMIT（{s} 秒が経過）',
  'd.callPurge': 'POST /demo/purge',
  'd.purgeDelete': '期限切れのキーの行を DELETE（PURGE_BATCH の {batch} 行ずつ）',
  'd.purgedRows': p => `キーの行を ${p.n} 行削除。課金はそのまま`,
  'd.expiredIsNew': p => `キー ${p.key} を登録 → 古い記録は期限切れなので初回扱い`,
  'd.purgedIsNew': p => `キー ${p.key} を登録 → 行はパージ済みで無いので初回扱い`,
  'd.countNote': p => `テーブルの課金は ${p.n} 件`,
  'd.failed': p => `リクエスト失敗: ${p.message}`,
  'd.gap': p => `${p.s} 秒経過`,
  'd.waitingLive': p => `${p.ms} ms…`,
  'tag.request': p => `リクエスト ${p.tag}`,
};

function plural(n, one, many) {
  return `${n} ${n === 1 ? one : many}`;
}

export const MESSAGES = { en, ja };
