"""A small payment-like API with PyPI's django-idempotency-key (1.3.0, the
middleware and settings its README shows, defaults otherwise) on Django 5.2,
shaped like charges' POST /charges, for `charges conformance` to measure
(docs/conformance.md). One file, no database: charges live in memory.
WORK_MS (default 0) makes each charge wait that long first.

    .venv/bin/python app.py runserver 127.0.0.1:8003 --noreload
"""

import json
import os
import sys
import threading
import time
import uuid

from django.conf import settings

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    SECRET_KEY="conformance-peer",
    MIDDLEWARE=["idempotency_key.middleware.IdempotencyKeyMiddleware"],
    INSTALLED_APPS=[],
    DATABASES={},
)

from django.http import JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402

WORK_MS = int(os.environ.get("WORK_MS", "0"))
# Charges per credential, newest first (what GET /charges lists).
CHARGES: dict[str, list[dict]] = {}
LIST_LOCK = threading.Lock()


def owner(request) -> str:
    return request.headers.get("authorization", "")


def charges(request):
    if request.method == "GET":
        with LIST_LOCK:
            return JsonResponse({"data": list(CHARGES.get(owner(request), []))})
    body = json.loads(request.body or b"{}")
    amount = body.get("amount")
    if not isinstance(amount, int) or amount <= 0:
        problem = {"type": "about:blank", "title": "invalid amount", "status": 400}
        return JsonResponse(problem, status=400, content_type="application/problem+json")
    if WORK_MS:
        time.sleep(WORK_MS / 1000)
    charge = {
        "id": str(uuid.uuid4()),
        "amount": amount,
        "currency": body.get("currency"),
        "description": body.get("description"),
    }
    with LIST_LOCK:
        CHARGES.setdefault(owner(request), []).insert(0, charge)
    response = JsonResponse(charge, status=201)
    response["Location"] = f"/charges/{charge['id']}"
    return response


def refunds(request, charge_id):
    body = json.loads(request.body or b"{}")
    refund = {"id": str(uuid.uuid4()), "charge_id": charge_id, "amount": body.get("amount")}
    return JsonResponse(refund, status=201)


urlpatterns = [
    path("charges", charges),
    path("charges/<str:charge_id>/refunds", refunds),
]

if __name__ == "__main__":
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
