"""The HTTP bodies of the instance's health and of the unlock that opens a locked one
(re-exported by :mod:`tidings.service.schemas`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from tidings.service.schemas.request import RequestBody


class Health(BaseModel):
    status: Literal["ok", "locked"] = Field(
        description="locked: started locked, waiting for the master key."
    )
    instance_id: str


class Unlock(RequestBody):
    master_key: str = Field(min_length=1, max_length=200,
                            description="The master key (64 hex characters).")

