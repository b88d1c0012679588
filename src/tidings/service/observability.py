"""Health, metrics and the operator's views and acts across every conversation (A2, A6, S8,
S10).

``/health`` needs no token and answers 503 when the store cannot be read. ``/metrics`` (the
Prometheus text format), ``/v1/signals/stats``, ``/v1/dead-letters`` (list, inspect, retry,
discard), ``/v1/instances`` and ``/v1/unlock`` need an operator token; a principal's token
gets 403.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from tidings.errors import InvalidInputError, MasterKeyError, TidingsError
from tidings.records.results import MasterKey
from tidings.service.auth import Identity, Operator, identity
from tidings.service.params import DeliveryId, Limit
from tidings.service.problems import HTTPProblem, documented, title_of
from tidings.service.routes import RuntimeDep
from tidings.service.schemas import (
    DeadLetterDetailOut,
    DeadLetterList,
    DeadLetterOut,
    DeadLetterSettledOut,
    Health,
    InstanceList,
    InstanceOut,
    PushDeadLetterList,
    PushDeadLetterOut,
    QueueStatsOut,
    SessionOut,
    Unlock,
)
from tidings.support.metrics import Gauge

PROMETHEUS_MEDIA_TYPE = CONTENT_TYPE_PLAIN_0_0_4
OPERATOR = documented(401, 403, 422, 500, 503)
OPERATOR_ONE = documented(401, 403, 404, 422, 500, 503)
OPERATOR_ACT = documented(401, 403, 404, 409, 422, 429, 500, 503)

router = APIRouter()


@router.get("/health", response_model=Health, responses=documented(422, 503), tags=["health"],
            summary="Liveness and store readability; no token needed")
async def health(runtime: RuntimeDep) -> Health:
    try:
        # The cheapest read the runtime offers that touches the database.
        await runtime.signals.stats()
    except TidingsError as exc:
        raise HTTPProblem(503, exc.code, "the store cannot be read",
                          title=title_of(exc)) from None
    return Health(status="locked" if runtime.locked else "ok", instance_id=runtime.instance_id)


@router.get("/v1/session", response_model=SessionOut,
            responses=documented(401, 422, 500, 503), tags=["health"],
            summary="Who the token speaks for, and what this server offers to open a "
                    "conversation with")
async def session(
    runtime: RuntimeDep, who: Annotated[Identity, Depends(identity)]
) -> SessionOut:
    return SessionOut(
        principal=who.principal, operator=who.operator, instance_id=runtime.instance_id,
        locked=runtime.locked, models=sorted(runtime.models), tools=sorted(runtime.tools.names()),
        profiles=sorted(runtime.profiles),
    )


@router.post("/v1/unlock", response_model=Health,
             responses=documented(400, 401, 403, 413, 422, 500, 503), tags=["health"],
             summary="Give a runtime that booted locked its master key (operator token)")
async def unlock(body: Unlock, runtime: RuntimeDep, _: Operator) -> Health:
    try:
        key = MasterKey.parse(body.master_key)
    except MasterKeyError:
        raise InvalidInputError("master_key must be 64 hex digits or base64 (32 bytes)") from None
    await runtime.unlock(key)
    return Health(status="locked" if runtime.locked else "ok", instance_id=runtime.instance_id)


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={200: {"description": "The Prometheus text exposition format (0.0.4).",
                     "content": {PROMETHEUS_MEDIA_TYPE: {"schema": {"type": "string"}}}},
               **OPERATOR},
    tags=["health"],
    summary="Prometheus metrics (operator token)",
)
async def metrics(runtime: RuntimeDep, _: Operator) -> PlainTextResponse:
    stats = await runtime.signals.stats()
    push = await runtime.push_deliveries.stats()
    gauges = [
        Gauge("tidings_signal_backlog", "Unacknowledged signal deliveries.", stats.backlog),
        Gauge("tidings_signal_oldest_age_seconds",
              "Age of the oldest unacknowledged delivery.",
              (stats.oldest_age_us or 0) / 1e6),
        Gauge("tidings_signal_retried", "Unacknowledged deliveries tried more than once.",
              stats.retried),
        Gauge("tidings_dead_letters", "Deliveries that will not be retried.",
              stats.dead_letters),
        Gauge("tidings_push_pending", "A2A push notifications not yet delivered.",
              push.pending),
        Gauge("tidings_push_dead_letters",
              "A2A push notifications that will not be retried.", push.dead_letters),
        Gauge("tidings_running_tasks", "Background processes running in this instance.",
              len(runtime.supervisor.running())),
    ]
    return PlainTextResponse(runtime.metrics.render(gauges), media_type=PROMETHEUS_MEDIA_TYPE)


@router.get("/v1/signals/stats", response_model=QueueStatsOut, responses=OPERATOR,
            tags=["signals"], summary="Signal totals over every conversation (operator token)")
async def signal_stats(runtime: RuntimeDep, _: Operator) -> QueueStatsOut:
    return QueueStatsOut.of(await runtime.signals.stats())


@router.get("/v1/dead-letters", response_model=DeadLetterList, responses=OPERATOR,
            tags=["signals"], summary="Dead letters of every conversation (operator token)")
async def dead_letters(
    runtime: RuntimeDep, _: Operator,
    limit: Limit = 100,
) -> DeadLetterList:
    return DeadLetterList(items=[DeadLetterOut.of(d) for d in
                                 await runtime.signals.dead_letters(limit=limit)])


@router.get("/v1/push-dead-letters", response_model=PushDeadLetterList, responses=OPERATOR,
            tags=["signals"],
            summary="A2A push notifications that failed for good, oldest first (operator token)")
async def push_dead_letters(
    runtime: RuntimeDep, _: Operator, limit: Limit = 100,
) -> PushDeadLetterList:
    letters = await runtime.push_deliveries.dead_letters(limit=limit)
    return PushDeadLetterList(items=[PushDeadLetterOut.of(d) for d in letters])


@router.get("/v1/dead-letters/{delivery_id}", response_model=DeadLetterDetailOut,
            responses=OPERATOR_ONE, tags=["signals"],
            summary="One dead letter, with its payload (operator token)")
async def dead_letter(
    delivery_id: DeliveryId, runtime: RuntimeDep, _: Operator
) -> DeadLetterDetailOut:
    return DeadLetterDetailOut.of(await runtime.signals.dead_letter(delivery_id))


@router.post("/v1/dead-letters/{delivery_id}/retry", response_model=DeadLetterSettledOut,
             responses=OPERATOR_ACT, tags=["signals"],
             summary="Deliver a dead letter again, with a fresh budget of attempts (operator "
                     "token); 429 when its conversation's backlog is full")
async def retry_dead_letter(
    delivery_id: DeliveryId, runtime: RuntimeDep, _: Operator
) -> DeadLetterSettledOut:
    return DeadLetterSettledOut.of(await runtime.signals.retry(delivery_id))


@router.post("/v1/dead-letters/{delivery_id}/discard", response_model=DeadLetterSettledOut,
             responses=OPERATOR_ACT, tags=["signals"],
             summary="Settle a dead letter without delivering it (operator token)")
async def discard_dead_letter(
    delivery_id: DeliveryId, runtime: RuntimeDep, _: Operator
) -> DeadLetterSettledOut:
    return DeadLetterSettledOut.of(await runtime.signals.discard(delivery_id))


@router.get("/v1/instances", response_model=InstanceList, responses=OPERATOR,
            tags=["health"],
            summary="The runtimes that booted over this database, newest first (operator token)")
async def instances(runtime: RuntimeDep, _: Operator, limit: Limit = 100) -> InstanceList:
    found = await runtime.instances(limit=limit)
    return InstanceList(items=[InstanceOut.of(i, serving=runtime.instance_id) for i in found])


__all__ = ("PROMETHEUS_MEDIA_TYPE", "router")
