// A small payment-like API with npm's express-idempotency (1.0.6, default
// options: in-memory store), shaped like charges' POST /charges, for
// `charges conformance` to measure (docs/conformance.md). The route follows
// the package's README: isHit() to skip a replayed request, reportError()
// to release the key of a request that failed. WORK_MS (default 0) makes
// each charge wait that long first, as a database or a card network would.
const crypto = require('node:crypto');
const express = require('express');
const { idempotency, getSharedIdempotencyService } = require('express-idempotency');

const app = express();
app.use(express.json());
app.post('*', idempotency());

// Resources per credential, newest first (what GET /charges lists).
const charges = new Map();
const owner = (req) => req.get('authorization') || '';
const workMs = Number(process.env.WORK_MS || 0);

app.post('/charges', async (req, res) => {
  const service = getSharedIdempotencyService();
  if (service.isHit(req)) return;
  const { amount, currency, description } = req.body || {};
  if (!Number.isInteger(amount) || amount <= 0) {
    service.reportError(req);
    return res.status(400).type('application/problem+json')
      .send({ type: 'about:blank', title: 'invalid amount', status: 400 });
  }
  if (workMs > 0) await new Promise((resolve) => setTimeout(resolve, workMs));
  const charge = { id: crypto.randomUUID(), amount, currency, description };
  const list = charges.get(owner(req)) || [];
  list.unshift(charge);
  charges.set(owner(req), list);
  res.status(201).location(`/charges/${charge.id}`).json(charge);
});

app.post('/charges/:id/refunds', (req, res) => {
  const service = getSharedIdempotencyService();
  if (service.isHit(req)) return;
  res.status(201).json({ id: crypto.randomUUID(), charge_id: req.params.id, amount: req.body.amount });
});

app.get('/charges', (req, res) => res.json({ data: charges.get(owner(req)) || [] }));

const server = app.listen(Number(process.env.PORT || 0), '127.0.0.1', () => {
  console.log(`peer-express listening on http://127.0.0.1:${server.address().port}`);
});
