"""The HTTP bodies: pydantic models of the service layer only, converted explicitly from (and
to) the runtime's frozen records, so the OpenAPI schema says exactly what is sent.

Request models forbid unknown fields: an input that carries ``origin``, ``authored_by`` or a
kernel stamp is refused, never silently dropped (M1).

One module per resource, each re-exported here: a conversation (:mod:`.conversations`), the
door and a waiting post's answer (:mod:`.inputs`), the transcript, runs and the acts on them
(:mod:`.runs`), approvals (:mod:`.approvals`), questions (:mod:`.questions`), the event feed
(:mod:`.feed`), signals (:mod:`.signals`), background work (:mod:`.background`), the operator's
views (:mod:`.operator`), the instance's health and unlock (:mod:`.instance`); the base of
every request body is :mod:`.request`.
"""

from __future__ import annotations

from tidings.service.schemas.approvals import ApprovalList as ApprovalList
from tidings.service.schemas.approvals import ApprovalOut as ApprovalOut
from tidings.service.schemas.approvals import Decision as Decision
from tidings.service.schemas.background import CancelledRequestOut as CancelledRequestOut
from tidings.service.schemas.background import ChildCancelled as ChildCancelled
from tidings.service.schemas.background import ChildRequestList as ChildRequestList
from tidings.service.schemas.background import ChildRequestOut as ChildRequestOut
from tidings.service.schemas.background import DropOut as DropOut
from tidings.service.schemas.background import ResultList as ResultList
from tidings.service.schemas.background import ResultPageOut as ResultPageOut
from tidings.service.schemas.background import ResultRefOut as ResultRefOut
from tidings.service.schemas.background import TaskOut as TaskOut
from tidings.service.schemas.background import TaskPage as TaskPage
from tidings.service.schemas.conversations import ConversationCreate as ConversationCreate
from tidings.service.schemas.conversations import ConversationOut as ConversationOut
from tidings.service.schemas.conversations import ConversationPage as ConversationPage
from tidings.service.schemas.conversations import ConversationSummaryOut as ConversationSummaryOut
from tidings.service.schemas.conversations import GoalUpdate as GoalUpdate
from tidings.service.schemas.conversations import ProfileBody as ProfileBody
from tidings.service.schemas.conversations import ProfileChange as ProfileChange
from tidings.service.schemas.conversations import ProfileOut as ProfileOut
from tidings.service.schemas.conversations import RunGlanceOut as RunGlanceOut
from tidings.service.schemas.conversations import UsageOut as UsageOut
from tidings.service.schemas.feed import EventOut as EventOut
from tidings.service.schemas.feed import EventPage as EventPage
from tidings.service.schemas.inputs import AnswerOut as AnswerOut
from tidings.service.schemas.inputs import AnswerStatus as AnswerStatus
from tidings.service.schemas.inputs import AuthorOut as AuthorOut
from tidings.service.schemas.inputs import InputCreate as InputCreate
from tidings.service.schemas.inputs import InputList as InputList
from tidings.service.schemas.inputs import InputOut as InputOut
from tidings.service.schemas.instance import Health as Health
from tidings.service.schemas.instance import Unlock as Unlock
from tidings.service.schemas.operator import DeadLetterDetailOut as DeadLetterDetailOut
from tidings.service.schemas.operator import DeadLetterSettledOut as DeadLetterSettledOut
from tidings.service.schemas.operator import InstanceList as InstanceList
from tidings.service.schemas.operator import InstanceOut as InstanceOut
from tidings.service.schemas.operator import PushDeadLetterList as PushDeadLetterList
from tidings.service.schemas.operator import PushDeadLetterOut as PushDeadLetterOut
from tidings.service.schemas.operator import SessionOut as SessionOut
from tidings.service.schemas.questions import QuestionAnswer as QuestionAnswer
from tidings.service.schemas.questions import QuestionList as QuestionList
from tidings.service.schemas.questions import QuestionOut as QuestionOut
from tidings.service.schemas.runs import Accepted as Accepted
from tidings.service.schemas.runs import Compacted as Compacted
from tidings.service.schemas.runs import MessageOut as MessageOut
from tidings.service.schemas.runs import RestartAccepted as RestartAccepted
from tidings.service.schemas.runs import RestartCreate as RestartCreate
from tidings.service.schemas.runs import RetryCreate as RetryCreate
from tidings.service.schemas.runs import RunList as RunList
from tidings.service.schemas.runs import RunOut as RunOut
from tidings.service.schemas.runs import RunStopped as RunStopped
from tidings.service.schemas.runs import Stopped as Stopped
from tidings.service.schemas.runs import Transcript as Transcript
from tidings.service.schemas.signals import DeadLetterList as DeadLetterList
from tidings.service.schemas.signals import DeadLetterOut as DeadLetterOut
from tidings.service.schemas.signals import QueueStatsOut as QueueStatsOut
