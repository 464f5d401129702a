"""The README's walk-through of the payments example, driven through a client that
openapi-python-client generated from the example's `GET /openapi.json` (`scripts/check-openapi`).

Usage: walkthrough.py BASE_URL. The server runs with `PAYMENTS_DELAY_MS` (so that a duplicate sent
while the first request runs meets a `409`) and a short `PAYMENTS_SETTLE_MS`. Every answer is read
through the generated models: the payments, the refunds, and the problem documents of the `400`,
`409`, `422` and `500`. Each step prints one line; the first wrong answer stops with exit code 1.
"""

import sys
import threading
import time
import uuid

from payments_client import Client
from payments_client.api.events import track_event
from payments_client.api.operations import stats
from payments_client.api.payments import create_payment, get_payment
from payments_client.api.refunds import create_refund
from payments_client.models import (
    CreatePayment,
    CreateRefund,
    IdempotencyProblem,
    Payment,
    Problem,
    Refund,
    TrackEvent,
)

PROBLEMS = "https://payments.example/problems/"


def check(step, condition, answer):
    if not condition:
        print(f"FAIL {step}: {answer.status_code} {answer.headers!r} {answer.content!r}")
        sys.exit(1)
    print(f"ok   {step}")


def replayed(answer):
    return answer.headers.get("Idempotent-Replayed") == "true"


def key(name):
    return f"{name}-{uuid.uuid4()}"


def main(base_url):
    client = Client(base_url=base_url, timeout=30.0)
    order = CreatePayment(amount="100.00", currency="EUR", customer_id="cus_1", order_id="ord_42")

    # Create, then retry: the same answer, byte for byte, marked as a replay.
    k = key("order-42")
    first = create_payment.sync_detailed(client=client, body=order, idempotency_key=k)
    check("create: 201 and a Payment", first.status_code == 201
          and isinstance(first.parsed, Payment) and first.parsed.amount == "100.00"
          and not replayed(first), first)
    again = create_payment.sync_detailed(client=client, body=order, idempotency_key=k)
    check("retry: the stored 201, Idempotent-Replayed", again.status_code == 201
          and replayed(again) and again.content == first.content, again)
    number = CreatePayment(amount=100, currency="EUR", customer_id="cus_1", order_id="ord_42")
    same = create_payment.sync_detailed(client=client, body=number, idempotency_key=k)
    check("100 is the request of \"100.00\": replayed", same.status_code == 201
          and replayed(same) and same.parsed.payment_id == first.parsed.payment_id, same)
    found = get_payment.sync_detailed(client=client, id=first.parsed.payment_id)
    check("read it back", found.status_code == 200
          and found.parsed.payment_id == first.parsed.payment_id, found)

    # The same key with another request: 422, a problem the generated model reads.
    other = CreatePayment(amount="99.00", currency="EUR", customer_id="cus_1", order_id="ord_42")
    reused = create_payment.sync_detailed(client=client, body=other, idempotency_key=k)
    check("same key, other amount: 422 key-reused", reused.status_code == 422
          and isinstance(reused.parsed, IdempotencyProblem)
          and reused.parsed.type_ == PROBLEMS + "key-reused"
          and reused.parsed.idempotency_key == k, reused)

    # A duplicate while the first request still runs: 409 with Retry-After; the first then
    # answers 201.
    slow = key("slow")
    body = CreatePayment(amount="10.00", currency="EUR", customer_id="cus_1", order_id="ord_43")
    answers = {}
    runner = threading.Thread(target=lambda: answers.setdefault("first", create_payment.sync_detailed(
        client=client, body=body, idempotency_key=slow)))
    runner.start()
    time.sleep(0.4)
    busy = create_payment.sync_detailed(client=client, body=body, idempotency_key=slow)
    runner.join()
    check("duplicate in flight: 409 in-progress, Retry-After", busy.status_code == 409
          and isinstance(busy.parsed, IdempotencyProblem)
          and busy.parsed.type_ == PROBLEMS + "in-progress"
          and int(busy.headers["Retry-After"]) >= 1
          and busy.parsed.retry_after == int(busy.headers["Retry-After"]), busy)
    check("the first request: 201", answers["first"].status_code == 201, answers["first"])

    # No key: 400, nothing runs.
    missing = create_payment.sync_detailed(client=client, body=order, idempotency_key="")
    check("empty key: 400 problem", missing.status_code == 400
          and isinstance(missing.parsed, Problem) and missing.parsed.status == 400, missing)

    # A processor failure is the handler's answer: stored, and replayed.
    fail = key("fail")
    xxx = CreatePayment(amount="10.00", currency="XXX", customer_id="cus_1", order_id="ord_44")
    failed = create_payment.sync_detailed(client=client, body=xxx, idempotency_key=fail)
    check("currency XXX: 500 problem", failed.status_code == 500
          and isinstance(failed.parsed, Problem) and not replayed(failed), failed)
    failed = create_payment.sync_detailed(client=client, body=xxx, idempotency_key=fail)
    check("retry: the stored 500, Idempotent-Replayed", failed.status_code == 500
          and replayed(failed), failed)

    # A refund (latest_state): 201 pending, then a retry answers its current state.
    r = key("refund")
    refund = create_refund.sync_detailed(client=client, id=first.parsed.payment_id,
                                         body=CreateRefund(amount="25.00"), idempotency_key=r)
    check("refund: 201 pending", refund.status_code == 201 and isinstance(refund.parsed, Refund)
          and refund.parsed.status == "pending", refund)
    time.sleep(0.5)
    later = create_refund.sync_detailed(client=client, id=first.parsed.payment_id,
                                        body=CreateRefund(amount="25.00"), idempotency_key=r)
    check("retry: 200, the refund now succeeded", later.status_code == 200 and replayed(later)
          and later.parsed.refund_id == refund.parsed.refund_id
          and later.parsed.status == "succeeded", later)

    # An event (suppress_only): 202, then the duplicate is suppressed.
    e = key("evt")
    event = track_event.sync_detailed(client=client, body=TrackEvent(name="checkout.viewed"),
                                      idempotency_key=e)
    check("event: 202", event.status_code == 202, event)
    dup = track_event.sync_detailed(client=client, body=TrackEvent(name="checkout.viewed"),
                                    idempotency_key=e)
    check("duplicate event: 200, the same id", dup.status_code == 200
          and dup.parsed.event_id == event.parsed.event_id, dup)

    counts = stats.sync_detailed(client=client)
    check("stats: 2 payments, 1 refund, 1 event", counts.status_code == 200
          and (counts.parsed.payments, counts.parsed.refunds, counts.parsed.events) == (2, 1, 1),
          counts)


if __name__ == "__main__":
    main(sys.argv[1])
