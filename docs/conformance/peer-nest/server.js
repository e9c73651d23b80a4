// A small payment-like API with npm's @node-idempotency/nestjs (1.0.4, the
// memory storage adapter, default options) on NestJS 10, shaped like
// charges' POST /charges, for `charges conformance` to measure
// (docs/conformance.md). The module and the @Idempotent() decorator are
// used as the package's README shows; plain JavaScript, so the decorators
// are applied with Reflect.decorate instead of TypeScript's @ syntax.
// WORK_MS (default 0) makes each charge wait that long first.
require('reflect-metadata');
const crypto = require('node:crypto');
const { NestFactory } = require('@nestjs/core');
const {
  Body, Controller, Get, Headers, HttpCode, HttpException, Module, Param, Post,
} = require('@nestjs/common');
const { Idempotent, NodeIdempotencyModule, StorageAdapterEnum } = require('@node-idempotency/nestjs');

const workMs = Number(process.env.WORK_MS || 0);
// Charges per credential, newest first (what GET /charges lists).
const charges = new Map();

class ChargesController {
  async create(body, authorization) {
    const { amount, currency, description } = body || {};
    if (!Number.isInteger(amount) || amount <= 0) {
      throw new HttpException({ type: 'about:blank', title: 'invalid amount', status: 400 }, 400);
    }
    if (workMs > 0) await new Promise((resolve) => setTimeout(resolve, workMs));
    const charge = { id: crypto.randomUUID(), amount, currency, description };
    const list = charges.get(authorization || '') || [];
    list.unshift(charge);
    charges.set(authorization || '', list);
    return charge;
  }

  list(authorization) {
    return { data: charges.get(authorization || '') || [] };
  }

  refund(id, body) {
    return { id: crypto.randomUUID(), charge_id: id, amount: (body || {}).amount };
  }
}

const proto = ChargesController.prototype;
const decorate = (name, decorators) => Object.defineProperty(proto, name,
  Reflect.decorate(decorators, proto, name, Object.getOwnPropertyDescriptor(proto, name)));
decorate('create', [Post(), HttpCode(201), Idempotent()]);
Body()(proto, 'create', 0);
Headers('authorization')(proto, 'create', 1);
decorate('list', [Get()]);
Headers('authorization')(proto, 'list', 0);
decorate('refund', [Post(':id/refunds'), HttpCode(201), Idempotent()]);
Param('id')(proto, 'refund', 0);
Body()(proto, 'refund', 1);
Reflect.decorate([Controller('charges')], ChargesController);

class AppModule {}
Reflect.decorate([Module({
  imports: [NodeIdempotencyModule.forRootAsync({ storage: { adapter: StorageAdapterEnum.memory } })],
  controllers: [ChargesController],
})], AppModule);

(async () => {
  const app = await NestFactory.create(AppModule, { logger: ['error'] });
  await app.listen(Number(process.env.PORT || 0), '127.0.0.1');
  console.log(`peer-nest listening on ${await app.getUrl()}`);
})();
