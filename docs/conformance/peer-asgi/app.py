"""A small payment-like API with PyPI's asgi-idempotency-header (0.2.0,
MemoryBackend, default options) on Starlette, shaped like charges' POST
/charges, for `charges conformance` to measure (docs/conformance.md). The
middleware is added as the package's README shows (its second form). WORK_MS
(default 0) makes each charge await that long first, as a database would.

    .venv/bin/uvicorn app:app --port 8002
"""

import asyncio
import os
import uuid

from idempotency_header_middleware import IdempotencyHeaderMiddleware
from idempotency_header_middleware.backends import MemoryBackend
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

WORK_MS = int(os.environ.get("WORK_MS", "0"))
# Charges per credential, newest first (what GET /charges lists).
CHARGES: dict[str, list[dict]] = {}


def owner(request: Request) -> str:
    return request.headers.get("authorization", "")


async def create_charge(request: Request) -> JSONResponse:
    body = await request.json()
    amount = body.get("amount")
    if not isinstance(amount, int) or amount <= 0:
        problem = {"type": "about:blank", "title": "invalid amount", "status": 400}
        return JSONResponse(problem, status_code=400, media_type="application/problem+json")
    if WORK_MS:
        await asyncio.sleep(WORK_MS / 1000)
    charge = {
        "id": str(uuid.uuid4()),
        "amount": amount,
        "currency": body.get("currency"),
        "description": body.get("description"),
    }
    CHARGES.setdefault(owner(request), []).insert(0, charge)
    return JSONResponse(charge, status_code=201, headers={"Location": f"/charges/{charge['id']}"})


async def create_refund(request: Request) -> JSONResponse:
    body = await request.json()
    refund = {"id": str(uuid.uuid4()), "charge_id": request.path_params["id"], "amount": body.get("amount")}
    return JSONResponse(refund, status_code=201)


async def list_charges(request: Request) -> JSONResponse:
    return JSONResponse({"data": CHARGES.get(owner(request), [])})


app = Starlette(
    routes=[
        Route("/charges", create_charge, methods=["POST"]),
        Route("/charges", list_charges, methods=["GET"]),
        Route("/charges/{id}/refunds", create_refund, methods=["POST"]),
    ],
    middleware=[Middleware(IdempotencyHeaderMiddleware, backend=MemoryBackend())],
)
