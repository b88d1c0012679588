"""Health, metrics and the operator's views across every conversation (A2, A6, S8, S10).

``/health`` needs no token and answers 503 when the store cannot be read. ``/metrics`` (the
Prometheus text format), ``/v1/signals/stats`` and ``/v1/dead-letters`` need an operator
token; a principal's token gets 403.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from tidings.errors import InvalidInputError, MasterKeyError, TidingsError
from tidings.metrics import Gauge
from tidings.results import MasterKey
from tidings.service.auth import Operator
from tidings.service.params import Limit
from tidings.service.problems import HTTPProblem, documented, title_of
from tidings.service.routes import RuntimeDep
from tidings.service.schemas import (
    DeadLetterList,
    DeadLetterOut,
    Health,
    QueueStatsOut,
    Unlock,
)

PROMETHEUS_MEDIA_TYPE = CONTENT_TYPE_PLAIN_0_0_4
OPERATOR = documented(401, 403, 422, 500, 503)

router = APIRouter()


@router.get("/health", response_model=Health, responses=documented(422, 503), tags=["health"],
            summary="Liveness and store readability; no token needed")
async def health(runtime: RuntimeDep) -> Health:
    try:
        # The cheapest read the runtime offers that touches the database.
        await runtime.signal_stats()
    except TidingsError as exc:
        raise HTTPProblem(503, exc.code, "the store cannot be read",
                          title=title_of(exc)) from None
    return Health(status="locked" if runtime.locked else "ok", instance_id=runtime.instance_id)


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
    stats = await runtime.signal_stats()
    gauges = [
        Gauge("tidings_signal_backlog", "Unacknowledged signal deliveries.", stats.backlog),
        Gauge("tidings_signal_oldest_age_seconds",
              "Age of the oldest unacknowledged delivery.",
              (stats.oldest_age_us or 0) / 1e6),
        Gauge("tidings_signal_retried", "Unacknowledged deliveries tried more than once.",
              stats.retried),
        Gauge("tidings_dead_letters", "Deliveries that will not be retried.",
              stats.dead_letters),
        Gauge("tidings_running_tasks", "Background processes running in this instance.",
              len(runtime.supervisor.running())),
    ]
    return PlainTextResponse(runtime.metrics.render(gauges), media_type=PROMETHEUS_MEDIA_TYPE)


@router.get("/v1/signals/stats", response_model=QueueStatsOut, responses=OPERATOR,
            tags=["signals"], summary="Signal totals over every conversation (operator token)")
async def signal_stats(runtime: RuntimeDep, _: Operator) -> QueueStatsOut:
    return QueueStatsOut.of(await runtime.signal_stats())


@router.get("/v1/dead-letters", response_model=DeadLetterList, responses=OPERATOR,
            tags=["signals"], summary="Dead letters of every conversation (operator token)")
async def dead_letters(
    runtime: RuntimeDep, _: Operator,
    limit: Limit = 100,
) -> DeadLetterList:
    return DeadLetterList(items=[DeadLetterOut.of(d) for d in
                                 await runtime.dead_letters(limit=limit)])


__all__ = ("PROMETHEUS_MEDIA_TYPE", "router")
