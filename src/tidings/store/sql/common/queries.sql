-- Named queries written once for both dialects (the loader is tidings/store/queries.py).
-- Parameters are :name everywhere; the PostgreSQL store rewrites them to psycopg's style at
-- load. "-- name --" heads a query; "-- {name} --" heads a fragment, text that a query splices
-- in where it writes {name} (a dialect may supply or replace it); {wakes(column)} is the
-- policy's passive-signal rule. A dialect's own queries.sql holds only what must differ there:
-- its block replaces the one of the same name here.

-- ============================================================================================
-- The migration ledger, instances, operations and signals (the outbox)
-- ============================================================================================

-- applied_migrations --
SELECT version FROM schema_migrations ORDER BY version;

-- record_migration --
INSERT INTO schema_migrations (version, name) VALUES (:version, :name);

-- register_instance --
INSERT INTO instances (instance_id, hostname, pid, started_at_us, heartbeat_at_us)
VALUES (:instance_id, :hostname, :pid, :now_us, :now_us);

-- heartbeat --
UPDATE instances SET heartbeat_at_us = :now_us
 WHERE instance_id = :instance_id AND stopped_at_us IS NULL;

-- stop_instance --
UPDATE instances SET stopped_at_us = :now_us, reconciled_at_us = :now_us
 WHERE instance_id = :instance_id AND stopped_at_us IS NULL;

-- mark_instance_gone --
UPDATE instances
   SET stopped_at_us = coalesce(stopped_at_us, :now_us), reconciled_at_us = :now_us
 WHERE instance_id = :instance_id;

-- void_slots --
-- The slots of an instance known to be gone (its liveness mark is free) expire now rather than
-- at their deadline: the next unit that takes such a slot answers the dead turn's open tool
-- calls outcome_unknown and fails its run, as it would after the expiry.
UPDATE conversations SET slot_deadline_us = :now_us
 WHERE slot_token IS NOT NULL AND slot_deadline_us > :now_us AND slot_instance = :instance_id
RETURNING conversation_id;

-- orphan_operations --
-- A restart is the exception (L2): it was asked for so that its instance would go; the next
-- instance completes it.
UPDATE operations SET state = 'outcome_unknown', settled_at_us = :now_us
 WHERE state = 'accepted' AND origin_instance = :instance_id AND kind <> 'restart'
RETURNING operation_id;

-- operation_by_key --
SELECT * FROM operations WHERE owner = :owner AND idempotency_key = :idempotency_key;

-- get_operation --
SELECT * FROM operations WHERE operation_id = :operation_id;

-- settle_operation --
UPDATE operations
   SET state = :state, outcome = :outcome, failure_code = :failure_code, settled_at_us = :now_us
 WHERE operation_id = :operation_id AND state = 'accepted';

-- event_by_key --
SELECT e.seq, e.event_id, d.delivery_id
  FROM signal_events e JOIN signal_deliveries d ON d.event_id = e.event_id
 WHERE e.conversation_id = :conversation_id AND e.idempotency_key = :idempotency_key;

-- claim_lease --
-- Lease the batch a claim read (where the claim did not lease it itself: leased = 0). The
-- batch is every candidate in its sequence span, so the span names it; the writer lock held
-- since the read means the same rows still match.
UPDATE signal_deliveries
   SET state = 'leased', lease_token = :token, lease_deadline_us = :deadline_us,
       claimable_at_us = :deadline_us, lease_instance = :instance_id, lease_owner = :owner,
       attempts = attempts + 1
 WHERE conversation_id = :conversation_id AND state IN ('ready', 'leased')
   AND queue_seq BETWEEN :first_seq AND :last_seq
   AND claimable_at_us <= :now_us AND attempts < :max_attempts;

-- undo_admission --
UPDATE signal_queues SET backlog = backlog - 1 WHERE conversation_id = :conversation_id;

-- count_dead_letters --
UPDATE signal_queues
   SET backlog = backlog - :dead, dead_letters = dead_letters + :dead
 WHERE conversation_id = :conversation_id;

-- dead_letter_exhausted --
UPDATE signal_deliveries
   SET state = 'dead_letter', settled_at_us = :now_us, lease_deadline_us = NULL,
       failure_code = CASE WHEN state = 'leased' THEN 'lease_expired'
                           ELSE 'attempts_exhausted' END
 WHERE state IN ('ready', 'leased') AND claimable_at_us <= :now_us
   AND attempts >= :max_attempts
RETURNING conversation_id;

-- purge_acknowledged --
-- Acknowledged events past retention, a bounded batch at a time; the purgeable_event fragment
-- is each dialect's word on which may go.
DELETE FROM signal_events
 WHERE event_id IN (SELECT event_id FROM signal_deliveries
                     WHERE state = 'acknowledged' AND settled_at_us < :before_us
                     LIMIT :limit)
   AND {purgeable_event};

-- {unsettled_stats} --
-- The figures of unsettled deliveries (those in the FROM), for one conversation or for all.
count(*) AS backlog,
       count(*) FILTER (WHERE state = 'ready') AS ready,
       count(*) FILTER (WHERE state = 'leased') AS leased,
       min(published_at_us) AS oldest_published_at_us,
       count(*) FILTER (WHERE (state = 'ready' AND attempts > 0)
                           OR (state = 'leased' AND attempts > 1)) AS retried,
       coalesce(max(attempts), 0) AS max_attempts

-- stats_conversation --
SELECT {unsettled_stats},
       (SELECT count(*) FROM signal_deliveries
         WHERE conversation_id = :conversation_id AND state = 'dead_letter') AS dead_letters
  FROM signal_deliveries
 WHERE conversation_id = :conversation_id AND state IN ('ready', 'leased');

-- stats_all --
SELECT {unsettled_stats},
       (SELECT count(*) FROM signal_deliveries WHERE state = 'dead_letter') AS dead_letters
  FROM signal_deliveries
 WHERE state IN ('ready', 'leased');

-- delivery_state --
SELECT state FROM signal_deliveries WHERE delivery_id = :delivery_id;

-- dead_letter --
SELECT d.delivery_id, d.event_id, d.conversation_id, d.state, d.attempts, d.failure_code,
       d.published_at_us, d.settled_at_us, d.lease_owner, e.type, e.payload, e.payload_bytes,
       e.schema_version, e.operation_id
  FROM signal_deliveries d JOIN signal_events e ON e.event_id = d.event_id
 WHERE d.delivery_id = :delivery_id;

-- dead_letter_retry --
-- Ready again with a fresh budget of attempts; the lease it may have died with is forgotten.
UPDATE signal_deliveries
   SET state = 'ready', attempts = 0, claimable_at_us = :now_us, failure_code = NULL,
       settled_at_us = NULL, lease_token = NULL, lease_deadline_us = NULL,
       lease_instance = NULL, lease_owner = NULL
 WHERE delivery_id = :delivery_id AND state = 'dead_letter'
RETURNING conversation_id, queue_seq;

-- dead_letter_requeued --
-- Counted in the backlog again, within its bound; the queue's head moves back to the letter's
-- place so that a claim finds it.
UPDATE signal_queues
   SET backlog = backlog + 1, dead_letters = dead_letters - 1,
       head_seq = CASE WHEN head_seq > CAST(:queue_seq AS BIGINT)
                       THEN CAST(:queue_seq AS BIGINT) ELSE head_seq END
 WHERE conversation_id = :conversation_id AND backlog < :backlog_limit
RETURNING backlog;

-- dead_letter_discard --
UPDATE signal_deliveries
   SET state = 'acknowledged', failure_code = :failure_code, settled_at_us = :now_us
 WHERE delivery_id = :delivery_id AND state = 'dead_letter'
RETURNING conversation_id;

-- dead_letter_discarded --
UPDATE signal_queues SET dead_letters = dead_letters - 1 WHERE conversation_id = :conversation_id;

-- list_instances --
SELECT instance_id, hostname, pid, started_at_us, heartbeat_at_us, stopped_at_us,
       reconciled_at_us
  FROM instances
 ORDER BY started_at_us DESC, instance_id LIMIT :limit;

-- ============================================================================================
-- Conversations, the door, runs, the transcript and the journal (C, M1-M3, S7)
-- ============================================================================================

-- insert_conversation --
INSERT INTO conversations (conversation_id, owner, title, profile, status, goal_status,
                           created_at_us, updated_at_us)
VALUES (:conversation_id, :owner, :title, :profile, 'active', 'none', :now_us, :now_us)
RETURNING *;

-- {conversation_row} --
-- A conversation with its unacknowledged signal count, so that most turns need not look for
-- ready signals at all, and whether task notifications wait to be delivered or consumed.
SELECT c.*, coalesce(q.backlog, 0) AS signal_backlog,
       EXISTS (SELECT 1 FROM tasks t
                WHERE t.conversation_id = c.conversation_id AND t.state <> 'running'
                  AND t.delivered = 0 AND t.cancelled = 0) AS undelivered_notifications,
       EXISTS (SELECT 1 FROM tasks t
                WHERE t.conversation_id = c.conversation_id
                  AND t.delivered = 1 AND t.consumed = 0) AS unconsumed_notifications
  FROM conversations c LEFT JOIN signal_queues q ON q.conversation_id = c.conversation_id
 WHERE c.conversation_id = :conversation_id

-- get_conversation --
{conversation_row};

-- lock_conversation --
-- With one writer at a time (SQLite), reading the row inside the write transaction is the
-- lock; a dialect with concurrent writers overrides this with a row lock.
{conversation_row};

-- save_conversation --
UPDATE conversations
   SET title = :title, profile = :profile, status = :status, goal_status = :goal_status,
       goal_text = :goal_text, suppressed = :suppressed, awaiting_person = :awaiting_person,
       queued_inputs = :queued_inputs,
       last_queue_position = :last_queue_position, last_message_seq = :last_message_seq,
       last_event_seq = :last_event_seq, history_start_seq = :history_start_seq,
       slot_token = :slot_token, slot_deadline_us = :slot_deadline_us,
       slot_instance = :slot_instance, slot_run = :slot_run, updated_at_us = :now_us
 WHERE conversation_id = :conversation_id;

-- save_conversation_state --
-- A unit that changed only the counters and the slot (most of a turn's): the conversation's
-- own fields, its profile JSON among them, are neither encoded nor written again.
UPDATE conversations
   SET queued_inputs = :queued_inputs, last_queue_position = :last_queue_position,
       last_message_seq = :last_message_seq, last_event_seq = :last_event_seq,
       history_start_seq = :history_start_seq, slot_token = :slot_token,
       slot_deadline_us = :slot_deadline_us, slot_instance = :slot_instance,
       slot_run = :slot_run, updated_at_us = :now_us
 WHERE conversation_id = :conversation_id;

-- list_conversations --
SELECT * FROM conversations
 WHERE owner = :owner AND status <> 'tombstoned' AND conversation_id > :after
 ORDER BY conversation_id LIMIT :limit;

-- {conversation_summary} --
-- A conversation with its last activity (its newest journal event) and its newest run, the one
-- a list shows at a glance; awaiting_approval says that run holds on an undecided call.
SELECT c.*, e.at_us AS last_activity_us, r.run_id AS run_run_id, r.status AS run_status,
       r.model AS run_model, r.failure_code AS run_failure_code,
       r.started_at_us AS run_started_at_us, r.ended_at_us AS run_ended_at_us,
       EXISTS (SELECT 1 FROM approvals a
                WHERE a.conversation_id = c.conversation_id AND a.run_id = r.run_id
                  AND a.status = 'pending') AS run_awaiting_approval
  FROM conversations c
  LEFT JOIN events e ON e.conversation_id = c.conversation_id AND e.seq = c.last_event_seq
  LEFT JOIN runs r ON r.run_id = (SELECT n.run_id FROM runs n
                                   WHERE n.conversation_id = c.conversation_id
                                   ORDER BY n.created_at_us DESC, n.run_id DESC LIMIT 1)

-- summaries_owned --
{conversation_summary}
 WHERE c.owner = :owner AND c.status <> 'tombstoned' AND c.conversation_id > :after
 ORDER BY c.conversation_id LIMIT :limit;

-- summaries_owned_newest --
{conversation_summary}
 WHERE c.owner = :owner AND c.status <> 'tombstoned'
   AND (:after = '' OR c.conversation_id < :after)
 ORDER BY c.conversation_id DESC LIMIT :limit;

-- summaries_all --
{conversation_summary}
 WHERE c.status <> 'tombstoned' AND c.conversation_id > :after
 ORDER BY c.conversation_id LIMIT :limit;

-- summaries_all_newest --
{conversation_summary}
 WHERE c.status <> 'tombstoned' AND (:after = '' OR c.conversation_id < :after)
 ORDER BY c.conversation_id DESC LIMIT :limit;

-- extend_slot --
-- The holder's deadline moves only while its token is current and unexpired; the answer says
-- whether someone asked the holder's run to stop (a stop from another process).
UPDATE conversations SET slot_deadline_us = :deadline_us
 WHERE conversation_id = :conversation_id AND slot_token = :token
   AND slot_deadline_us > :now_us;
SELECT r.stop_requested
  FROM conversations c JOIN runs r ON r.run_id = c.slot_run
 WHERE c.conversation_id = :conversation_id AND c.slot_token = :token
   AND c.slot_deadline_us = :deadline_us;

-- stranded_conversations --
-- What the sweep re-finds when a wake-up was missed: queued inputs with no live slot holder,
-- slots whose holder's lease expired, and signals that came due after a backoff. Each branch
-- matches one partial index (an OR across two of them would read the whole table).
SELECT i.conversation_id
  FROM inputs i JOIN conversations c ON c.conversation_id = i.conversation_id
 WHERE i.state = 'queued' AND c.status <> 'tombstoned'
   AND (c.slot_token IS NULL OR c.slot_deadline_us <= :now_us)
UNION
SELECT conversation_id FROM conversations
 WHERE slot_token IS NOT NULL AND slot_deadline_us <= :now_us
UNION
SELECT t.conversation_id
  FROM tasks t JOIN conversations c ON c.conversation_id = t.conversation_id
 WHERE t.state <> 'running' AND t.delivered = 0 AND t.cancelled = 0 AND t.committed = 1
   AND t.handed_off = 1 AND t.notify = 'on_exit' AND t.reported_in_tool_result = 0
   AND c.suppressed = 0 AND c.awaiting_person = 0 AND c.status <> 'tombstoned'
   AND (c.slot_token IS NULL OR c.slot_deadline_us <= :now_us)
UNION
SELECT t.conversation_id
  FROM tasks t JOIN conversations c ON c.conversation_id = t.conversation_id
 WHERE t.delivered = 1 AND t.consumed = 0
   AND c.suppressed = 0 AND c.awaiting_person = 0 AND c.status <> 'tombstoned'
   AND (c.slot_token IS NULL OR c.slot_deadline_us <= :now_us)
UNION
SELECT d.conversation_id
  FROM signal_deliveries d JOIN conversations c ON c.conversation_id = d.conversation_id
 WHERE d.state IN ('ready', 'leased') AND d.state = 'ready'
   AND d.claimable_at_us <= :now_us AND d.attempts < :max_attempts
   AND c.suppressed = 0 AND c.awaiting_person = 0 AND c.status <> 'tombstoned'
   AND (c.slot_token IS NULL OR c.slot_deadline_us <= :now_us)
LIMIT :limit;

-- has_ready_signals --
-- A ready signal that wakes the conversation (L3): passive types (config, approval and job
-- events) are read by the next turn, never starting one. The wakes fragment is policy.wakes,
-- written in by the loader from policy.PASSIVE_SIGNAL_PREFIXES.
-- (state IN ('ready', 'leased') repeats the queue index's condition, so that SQLite uses it.)
SELECT EXISTS (SELECT 1 FROM signal_deliveries d JOIN signal_events e ON e.event_id = d.event_id
                WHERE d.conversation_id = :conversation_id
                  AND d.state IN ('ready', 'leased') AND d.state = 'ready'
                  AND d.claimable_at_us <= :now_us AND d.attempts < :max_attempts
                  AND {wakes(e.type)}) AS ready;

-- insert_input --
INSERT INTO inputs (input_id, conversation_id, queue_position, origin, kernel, author_kind,
                    author_handle, author_display_name, sender_conversation_id, run_public_id,
                    task_key, delivery_mode, content, meta, idempotency_key, state,
                    accepted_at_us)
VALUES (:input_id, :conversation_id, :queue_position, :origin, :kernel, :author_kind,
        :author_handle, :author_display_name, :sender_conversation_id, :run_public_id,
        :task_key, :delivery_mode, :content, :meta, :idempotency_key, 'queued', :now_us);

-- input_by_key --
SELECT * FROM inputs WHERE conversation_id = :conversation_id AND idempotency_key = :key;

-- queued_inputs --
-- The read order (M2): the kernel's rows first, then arrival.
SELECT * FROM inputs
 WHERE conversation_id = :conversation_id AND state = 'queued'
 ORDER BY kernel DESC, queue_position
 LIMIT :limit;

-- queued_steers --
SELECT * FROM inputs
 WHERE conversation_id = :conversation_id AND state = 'queued' AND delivery_mode = 'steer'
 ORDER BY kernel DESC, queue_position
 LIMIT :limit;

-- list_inputs --
-- Queued inputs in read order, then the read ones in the order the transcript holds them.
SELECT * FROM inputs
 WHERE conversation_id = :conversation_id
 ORDER BY CASE WHEN state = 'queued' THEN 0 ELSE 1 END,
          CASE WHEN state = 'queued' THEN -kernel ELSE 0 END,
          CASE WHEN state = 'queued' THEN 0 ELSE coalesce(message_seq, 0) END,
          queue_position
 LIMIT :limit;

-- materialize_input --
UPDATE inputs SET state = 'materialized', run_id = :run_id, materialized_at_us = :now_us,
                  message_seq = :message_seq
 WHERE input_id = :input_id AND state = 'queued';

-- insert_run --
INSERT INTO runs (run_id, conversation_id, trigger, status, instance_id, created_at_us,
                  started_at_us)
VALUES (:run_id, :conversation_id, :trigger, :status, :instance_id, :now_us, :now_us);

-- finish_run --
UPDATE runs SET status = :status, failure_code = :failure_code, model = :model,
                steps = :steps, ended_at_us = :now_us
 WHERE run_id = :run_id AND status IN ('queued', 'running');

-- record_run_usage --
-- What an ending run's model calls spent (B8): summed in the turn, written in its final unit.
INSERT INTO run_usage (conversation_id, run_id, model_calls, input_tokens, output_tokens,
                       cache_read_tokens, cache_write_tokens)
VALUES (:conversation_id, :run_id, :model_calls, :input_tokens, :output_tokens,
        :cache_read_tokens, :cache_write_tokens);

-- record_run_failures --
-- Which models an ending run asked and why each failed (B7), written in its final unit.
INSERT INTO run_failures (conversation_id, run_id, models)
VALUES (:conversation_id, :run_id, :models);

-- {run_usage} --
-- A run's usage columns, for a read of ``runs r LEFT JOIN run_usage u``: zero for a run that
-- has not ended, or called no model.
coalesce(u.model_calls, 0) AS model_calls, coalesce(u.input_tokens, 0) AS input_tokens,
coalesce(u.output_tokens, 0) AS output_tokens,
coalesce(u.cache_read_tokens, 0) AS cache_read_tokens,
coalesce(u.cache_write_tokens, 0) AS cache_write_tokens

-- conversation_usage --
-- A conversation's usage (B8): the sums over its runs, read at read time, never stored on the
-- conversation (a turn writes nothing more for it).
SELECT CAST(coalesce(sum(model_calls), 0) AS bigint) AS model_calls,
       CAST(coalesce(sum(input_tokens), 0) AS bigint) AS input_tokens,
       CAST(coalesce(sum(output_tokens), 0) AS bigint) AS output_tokens,
       CAST(coalesce(sum(cache_read_tokens), 0) AS bigint) AS cache_read_tokens,
       CAST(coalesce(sum(cache_write_tokens), 0) AS bigint) AS cache_write_tokens
  FROM run_usage WHERE conversation_id = :conversation_id;

-- get_run --
-- ``awaiting_approval``: the run holds on a call a person has not decided yet; a running run
-- reads as ``awaiting_approval`` then (the status is derived, never stored).
SELECT r.*, EXISTS (SELECT 1 FROM approvals a
                     WHERE a.run_id = r.run_id AND a.status = 'pending') AS awaiting_approval,
       {run_usage}, f.models AS model_failures
  FROM runs r
  LEFT JOIN run_usage u ON u.conversation_id = r.conversation_id AND u.run_id = r.run_id
  LEFT JOIN run_failures f ON f.conversation_id = r.conversation_id AND f.run_id = r.run_id
 WHERE r.run_id = :run_id;

-- list_runs --
SELECT r.*, EXISTS (SELECT 1 FROM approvals a
                     WHERE a.run_id = r.run_id AND a.status = 'pending') AS awaiting_approval,
       {run_usage}, f.models AS model_failures
  FROM runs r
  LEFT JOIN run_usage u ON u.conversation_id = r.conversation_id AND u.run_id = r.run_id
  LEFT JOIN run_failures f ON f.conversation_id = r.conversation_id AND f.run_id = r.run_id
 WHERE r.conversation_id = :conversation_id
 ORDER BY r.created_at_us, r.run_id LIMIT :limit;

-- open_runs --
-- The runs that hold a conversation's slot (at most one each), for the command line's status.
SELECT r.*, EXISTS (SELECT 1 FROM approvals a
                     WHERE a.run_id = r.run_id AND a.status = 'pending') AS awaiting_approval
  FROM conversations c JOIN runs r ON r.run_id = c.slot_run
 WHERE c.slot_token IS NOT NULL AND r.status IN ('queued', 'running')
   AND (:conversation_id = '' OR c.conversation_id = :conversation_id)
 ORDER BY r.created_at_us, r.run_id LIMIT :limit;

-- request_stop --
UPDATE runs SET stop_requested = 1
 WHERE conversation_id = :conversation_id AND status IN ('queued', 'running')
RETURNING run_id;

-- insert_message --
-- Strict pairing, enforced here: while a tool call of the conversation is open, nothing but a
-- tool result may be appended (a result is let in by answer_tool_call, which runs first).
INSERT INTO messages (conversation_id, seq, message_id, run_id, role, content, tool_calls,
                      tool_call_id, tool_name, origin, input_id, meta, created_at_us)
SELECT :conversation_id, :seq, :message_id, :run_id, :role, :content, :tool_calls,
       :tool_call_id, :tool_name, :origin, :input_id, :meta, :now_us
 WHERE CAST(:role AS text) = 'tool'
    OR NOT EXISTS (SELECT 1 FROM tool_calls
                    WHERE conversation_id = :conversation_id AND result_seq IS NULL);

-- insert_tool_call --
INSERT INTO tool_calls (conversation_id, call_seq, call_id, name, run_id)
VALUES (:conversation_id, :call_seq, :call_id, :name, :run_id);

-- answer_tool_call --
UPDATE tool_calls SET result_seq = :seq
 WHERE conversation_id = :conversation_id AND call_id = :call_id AND result_seq IS NULL;

-- open_tool_calls --
SELECT call_id, name, run_id, call_seq FROM tool_calls
 WHERE conversation_id = :conversation_id AND result_seq IS NULL
 ORDER BY call_seq, call_id;

-- history --
SELECT * FROM messages
 WHERE conversation_id = :conversation_id AND seq > :after_seq
 ORDER BY seq DESC LIMIT :limit;

-- transcript --
SELECT * FROM messages
 WHERE conversation_id = :conversation_id AND seq > :after_seq
 ORDER BY seq LIMIT :limit;

-- run_transcript --
-- One run's messages, in order (an A2A task's history).
SELECT * FROM messages
 WHERE run_id = :run_id AND conversation_id = :conversation_id AND seq > :after_seq
 ORDER BY seq LIMIT :limit;

-- events_after --
SELECT * FROM events
 WHERE conversation_id = :conversation_id AND seq > :after_seq
 ORDER BY seq LIMIT :limit;

-- ============================================================================================
-- Result envelopes (R1-R4)
-- ============================================================================================

-- insert_result --
INSERT INTO result_envelopes (result_id, conversation_id, task_key, run_id, status,
                              failure_code, size_bytes, key_version, nonce, ciphertext,
                              created_at_us, expires_at_us)
VALUES (:result_id, :conversation_id, :task_key, :run_id, :status, :failure_code, :size_bytes,
        :key_version, :nonce, :ciphertext, :now_us, :expires_at_us);

-- get_result --
-- Owner-scoped: another conversation's id reads exactly like an unknown one. Expired rows are
-- gone for readers even before the sweeper removes them.
SELECT e.*, d.drops
  FROM result_envelopes e LEFT JOIN result_drops d ON d.result_id = e.result_id
 WHERE e.result_id = :result_id AND e.conversation_id = :conversation_id
   AND e.expires_at_us > :now_us;

-- list_results --
SELECT e.result_id, e.conversation_id, e.task_key, e.run_id, e.status, e.failure_code,
       e.size_bytes, e.created_at_us, e.expires_at_us, d.drops
  FROM result_envelopes e LEFT JOIN result_drops d ON d.result_id = e.result_id
 WHERE e.conversation_id = :conversation_id AND e.expires_at_us > :now_us
   AND e.result_id > :after
 ORDER BY e.result_id LIMIT :limit;

-- insert_result_drops --
INSERT INTO result_drops (result_id, drops, expires_at_us)
VALUES (:result_id, :drops, :expires_at_us);

-- result_drops --
SELECT drops FROM result_drops WHERE result_id = :result_id;

-- purge_results --
DELETE FROM result_envelopes
 WHERE result_id IN (SELECT result_id FROM result_envelopes
                      WHERE expires_at_us <= :now_us ORDER BY expires_at_us LIMIT :limit);

-- purge_result_drops --
DELETE FROM result_drops
 WHERE result_id IN (SELECT result_id FROM result_drops
                      WHERE expires_at_us <= :now_us ORDER BY expires_at_us LIMIT :limit);

-- ============================================================================================
-- The task journal (T2-T9)
-- ============================================================================================

-- insert_task --
INSERT INTO tasks (task_id, conversation_id, task_key, run_id, call_id, command, notify,
                   lifetime, state, handed_off, instance_id, started_at_us)
VALUES (:task_id, :conversation_id, :task_key, :run_id, :call_id, :command, :notify,
        :lifetime, 'running', :handed_off, :instance_id, :now_us);

-- {direct_run} --
-- Whether task t's run r (joined on t.run_id) was a direct turn -- a person's, an agent's, the
-- kernel's mail -- or the task ran outside any run (the host started it): only such a task's
-- notification wakes its conversation (L3).
(r.run_id IS NULL OR r.trigger IN ('person', 'agent', 'mail'))

-- get_task --
-- A task, with where its work runs when that is an MCP server, and whether its notification
-- may wake the conversation.
SELECT t.*, m.server AS mcp_server, m.tool AS mcp_tool, m.mcp_task_id, {direct_run} AS direct
  FROM tasks t LEFT JOIN mcp_tasks m ON m.task_id = t.task_id
  LEFT JOIN runs r ON r.run_id = t.run_id
 WHERE t.conversation_id = :conversation_id AND t.task_key = :task_key;

-- finish_task --
-- The terminal state is recorded once; its event id is assigned with it and never changes.
UPDATE tasks
   SET state = :state, exit_code = :exit_code, signal = :signal, event_id = :event_id,
       result_id = :result_id, stdout_bytes = :stdout_bytes, stderr_bytes = :stderr_bytes,
       excerpt = :excerpt, excerpt_truncated = :excerpt_truncated, duration_ms = :duration_ms,
       ended_at_us = :now_us
 WHERE task_id = :task_id AND state = 'running';

-- set_task_flags --
UPDATE tasks
   SET committed = :committed, handed_off = :handed_off, delivered = :delivered,
       consumed = :consumed, cancelled = :cancelled,
       reported_in_tool_result = :reported_in_tool_result,
       continuation_error = :continuation_error,
       notification_seq = coalesce(:notification_seq, notification_seq)
 WHERE task_id = :task_id;

-- set_notification_seq --
-- The run that read a task's notice: the task keeps the message's position (T6). A record read
-- before it (set_task_flags with no position) never clears it.
UPDATE tasks SET notification_seq = :seq
 WHERE conversation_id = :conversation_id AND task_key = :task_key;

-- undelivered_tasks --
SELECT t.*, m.server AS mcp_server, m.tool AS mcp_tool, m.mcp_task_id, {direct_run} AS direct
  FROM tasks t LEFT JOIN mcp_tasks m ON m.task_id = t.task_id
  LEFT JOIN runs r ON r.run_id = t.run_id
 WHERE t.conversation_id = :conversation_id AND t.state <> 'running'
   AND t.delivered = 0 AND t.cancelled = 0
 ORDER BY t.ended_at_us, t.task_id;

-- direct_notifications --
-- Whether a notification waiting unconsumed belongs to a task that may wake the conversation.
SELECT EXISTS (SELECT 1 FROM tasks t LEFT JOIN runs r ON r.run_id = t.run_id
                WHERE t.conversation_id = :conversation_id AND t.delivered = 1
                  AND t.consumed = 0 AND {direct_run}) AS direct;

-- unconsumed_tasks --
-- Notifications read into the transcript and not yet handled: one accepted at the door but not
-- read yet is not handled by the turn that ends now (T5).
SELECT * FROM tasks
 WHERE conversation_id = :conversation_id AND delivered = 1 AND consumed = 0
   AND notification_seq IS NOT NULL
 ORDER BY notification_seq;

-- running_tasks_of --
SELECT * FROM tasks WHERE instance_id = :instance_id AND state = 'running';

-- orphaned_tasks --
-- Tasks still running in the journal whose instance is gone (stopped, or reconciled after it
-- died): their processes died with it, or were left behind (pid, host and start time say
-- which); an MCP server's task may still run there (server and task id say where).
SELECT t.conversation_id, t.task_key, t.instance_id, p.pid, p.host, p.process_started,
       m.server AS mcp_server, m.mcp_task_id
  FROM tasks t JOIN instances i ON i.instance_id = t.instance_id
  LEFT JOIN task_processes p ON p.task_id = t.task_id
  LEFT JOIN mcp_tasks m ON m.task_id = t.task_id
 WHERE t.state = 'running' AND t.instance_id <> :instance_id
   AND (i.stopped_at_us IS NOT NULL OR i.reconciled_at_us IS NOT NULL)
 ORDER BY t.started_at_us
 LIMIT :limit;

-- set_task_process --
-- Where the task's process runs, recorded once it has started.
INSERT INTO task_processes (task_id, pid, host, process_started)
VALUES (:task_id, :pid, :host, :process_started)
ON CONFLICT (task_id) DO NOTHING;

-- insert_mcp_task --
-- Where a task's work runs when an MCP server runs it: written with the task's start.
INSERT INTO mcp_tasks (task_id, server, tool, mcp_task_id)
VALUES (:task_id, :server, :tool, :mcp_task_id);

-- adopt_task --
-- A live instance takes over following a task whose instance is gone (an MCP server's task:
-- it may still run there). Only one instance can: the row must still name the gone one.
UPDATE tasks SET instance_id = :instance_id
 WHERE task_id = :task_id AND state = 'running' AND instance_id = :gone_instance_id;

-- tasks_of_run --
-- The tasks a run started (its stop cancels their notifications; its end hands off the
-- turn-lifetime ones).
SELECT t.*, m.server AS mcp_server, m.tool AS mcp_tool, m.mcp_task_id
  FROM tasks t LEFT JOIN mcp_tasks m ON m.task_id = t.task_id
 WHERE t.conversation_id = :conversation_id AND t.run_id = :run_id
 ORDER BY t.started_at_us, t.task_id;

-- open_tasks --
-- What a compaction must carry into its hand-off (T7): tasks still running, and tasks whose
-- notification is owed or was delivered but not yet handled.
SELECT task_key, state, event_id, result_id, delivered, consumed FROM tasks
 WHERE conversation_id = :conversation_id
   AND (state = 'running' OR (delivered = 1 AND consumed = 0)
        OR (delivered = 0 AND cancelled = 0 AND notify = 'on_exit'
            AND reported_in_tool_result = 0))
 ORDER BY started_at_us;

-- conversation_tasks --
-- A conversation's tasks, newest first, for the API (paged by start time).
SELECT t.*, m.server AS mcp_server, m.tool AS mcp_tool, m.mcp_task_id
  FROM tasks t LEFT JOIN mcp_tasks m ON m.task_id = t.task_id
 WHERE t.conversation_id = :conversation_id AND t.started_at_us < :before_us
 ORDER BY t.started_at_us DESC, t.task_id DESC
 LIMIT :limit;

-- ============================================================================================
-- Lifecycle (L2)
-- ============================================================================================

-- pending_restarts --
-- Restarts accepted by instances that are gone: the next instance completes them.
SELECT o.* FROM operations o JOIN instances i ON i.instance_id = o.origin_instance
 WHERE o.kind = 'restart' AND o.state = 'accepted' AND o.origin_instance <> :instance_id
   AND (i.stopped_at_us IS NOT NULL OR i.reconciled_at_us IS NOT NULL)
 ORDER BY o.accepted_at_us
 LIMIT :limit;

-- events_of_type --
SELECT * FROM events
 WHERE conversation_id = :conversation_id AND type = :type AND at_us >= :since_us
 ORDER BY seq LIMIT :limit;

-- interrupted_tasks --
-- What an instance's end interrupted in one conversation: tasks it killed or lost.
SELECT task_key, state, command FROM tasks
 WHERE conversation_id = :conversation_id AND instance_id = :instance_id
   AND state IN ('killed', 'lost') AND ended_at_us >= :since_us
 ORDER BY started_at_us LIMIT :limit;

-- ============================================================================================
-- Approvals (L5)
-- ============================================================================================

-- insert_approval --
INSERT INTO approvals (approval_id, conversation_id, run_id, call_id, tool_name, arguments,
                       status, requested_at_us, expires_at_us)
VALUES (:approval_id, :conversation_id, :run_id, :call_id, :tool_name, :arguments, 'pending',
        :now_us, :expires_at_us);

-- get_approval --
SELECT * FROM approvals WHERE approval_id = :approval_id;

-- decide_approval --
-- Only a pending approval is decided: a terminal decision is never overwritten.
UPDATE approvals SET status = :status, decided_by = :decided_by, decided_at_us = :now_us
 WHERE approval_id = :approval_id AND status = 'pending';

-- apply_approval --
-- The fence: an approval is applied once, by the holder of the run's slot.
UPDATE approvals SET status = 'applied', applied_at_us = :now_us
 WHERE approval_id = :approval_id AND status = 'approved';

-- expire_approval --
UPDATE approvals SET status = 'expired', decided_at_us = :now_us
 WHERE approval_id = :approval_id AND status = 'pending';

-- conversation_approvals --
SELECT * FROM approvals
 WHERE conversation_id = :conversation_id AND (:status = '' OR status = :status)
 ORDER BY requested_at_us DESC, approval_id DESC
 LIMIT :limit;

-- expire_run_approvals --
-- A run that ended without applying them: its pending approvals can never apply any more.
UPDATE approvals SET status = 'expired', decided_at_us = :now_us
 WHERE run_id = :run_id AND status = 'pending';

-- ============================================================================================
-- Child conversations (M16, M17)
-- ============================================================================================

-- insert_child_request --
INSERT INTO child_requests (request_id, parent_conversation_id, child_conversation_id, input_id,
                            run_public_id, call_id, task_key, kind, environment, state,
                            created_at_us)
VALUES (:request_id, :parent_conversation_id, :child_conversation_id, :input_id,
        :run_public_id, :call_id, :task_key, :kind, :environment, 'open', :now_us);

-- insert_turn_owned_request --
INSERT INTO turn_owned_requests (request_id, owner_run) VALUES (:request_id, :owner_run);

-- reply_child_request --
-- The child's run that read the request answered it: once (the first answer stands).
UPDATE child_requests
   SET state = 'replied', reply_status = :reply_status, reply = :reply,
       reply_run_id = :reply_run_id, replied_at_us = :now_us
 WHERE input_id = :input_id AND state = 'open';

-- unrelayed_child_requests --
-- Level-triggered: every reply not yet relayed, oldest first -- but a turn-owned reply only
-- once the run that owns it has ended without consuming it (M16).
SELECT c.*, o.owner_run, o.consumed_in_run FROM child_requests c
  LEFT JOIN turn_owned_requests o ON o.request_id = c.request_id
 WHERE c.state = 'replied' AND c.relayed_at_us IS NULL
   AND (o.owner_run IS NULL OR NOT EXISTS (
        SELECT 1 FROM runs r WHERE r.run_id = o.owner_run AND r.status IN ('queued', 'running')))
 ORDER BY c.replied_at_us, c.request_id
 LIMIT :limit;

-- consume_child_request_in_run --
-- A turn-owned reply consumed by the run that owns it (a wait, or its synthesis round): it is
-- never relayed as mail after this (M16, M17).
UPDATE child_requests SET relayed_at_us = :now_us
 WHERE request_id = :request_id AND state = 'replied' AND relayed_at_us IS NULL
   AND EXISTS (SELECT 1 FROM turn_owned_requests o
                WHERE o.request_id = :request_id AND o.owner_run = :run_id);

-- mark_consumed_in_run --
UPDATE turn_owned_requests SET consumed_in_run = :run_id WHERE request_id = :request_id;

-- owned_child_replies --
-- The replies a run owns that arrived and are not consumed yet.
SELECT c.*, o.owner_run, o.consumed_in_run FROM child_requests c
  LEFT JOIN turn_owned_requests o ON o.request_id = c.request_id
 WHERE o.owner_run = :run_id AND c.state = 'replied' AND c.relayed_at_us IS NULL
 ORDER BY c.replied_at_us, c.request_id;

-- child_request --
SELECT c.*, o.owner_run, o.consumed_in_run FROM child_requests c
  LEFT JOIN turn_owned_requests o ON o.request_id = c.request_id
 WHERE c.request_id = :request_id;

-- child_link --
-- Whether ``child`` is a child this parent opened (a send may only go there).
SELECT request_id FROM child_requests
 WHERE parent_conversation_id = :parent_conversation_id
   AND child_conversation_id = :child_conversation_id
 LIMIT 1;

-- child_requests_of_parent --
-- With each remote child's agent, remote task and its last known state (P5).
SELECT c.*, o.owner_run, o.consumed_in_run, r.agent, r.remote_task_id, r.remote_state
  FROM child_requests c
  LEFT JOIN turn_owned_requests o ON o.request_id = c.request_id
  LEFT JOIN remote_children r ON r.request_id = c.request_id
 WHERE c.parent_conversation_id = :parent_conversation_id
 ORDER BY c.created_at_us, c.request_id
 LIMIT :limit;

-- queued_notices --
-- Task notices accepted at the door and not read yet, in arrival order: the running turn
-- reads them at its next safe point (T4, M13).
SELECT * FROM inputs
 WHERE conversation_id = :conversation_id AND state = 'queued' AND origin = 'task_result'
 ORDER BY queue_position;

-- queued_kernel_inputs_of_run --
-- A source run's supplementary inputs still queued in this conversation (M14).
SELECT input_id FROM inputs
 WHERE conversation_id = :conversation_id AND run_public_id = :run_public_id AND kernel = 1
   AND state = 'queued'
 ORDER BY queue_position;

-- cancel_child_requests_of_run --
-- A stopped source run is owed nothing more by its children (M14).
UPDATE child_requests SET state = 'cancelled'
 WHERE parent_conversation_id = :parent_conversation_id AND run_public_id = :run_public_id
   AND relayed_at_us IS NULL AND state IN ('open', 'replied')
RETURNING request_id, child_conversation_id, input_id, task_key;

-- cancel_child_request --
-- One request its parent cancelled (a ``cancel`` call): its reply is owed to no one (M16).
UPDATE child_requests SET state = 'cancelled'
 WHERE parent_conversation_id = :parent_conversation_id AND task_key = :task_key
   AND relayed_at_us IS NULL AND state IN ('open', 'replied')
RETURNING request_id, child_conversation_id, input_id, task_key;

-- get_input --
SELECT * FROM inputs WHERE input_id = :input_id;

-- child_request_by_key --
SELECT c.*, o.owner_run, o.consumed_in_run FROM child_requests c
  LEFT JOIN turn_owned_requests o ON o.request_id = c.request_id
 WHERE c.parent_conversation_id = :parent_conversation_id AND c.task_key = :task_key;

-- cancel_queued_input --
-- One queued input withdrawn (a cancelled child request not yet read).
UPDATE inputs SET state = 'cancelled'
 WHERE conversation_id = :conversation_id AND input_id = :input_id AND state = 'queued'
RETURNING input_id;

-- last_turn_status --
-- A run's newest turn_status: while it runs, its start (naming the inputs it took); once it
-- ended, its end (naming the models it tried).
SELECT data FROM events
 WHERE conversation_id = :conversation_id AND run_id = :run_id AND type = 'turn_status'
 ORDER BY seq DESC
 LIMIT 1;

-- inputs_of_run --
-- The inputs a run read (materialized by it).
SELECT * FROM inputs WHERE conversation_id = :conversation_id AND run_id = :run_id
 ORDER BY queue_position;

-- run_reply --
-- A run's final answer: its newest assistant message without tool calls, after the message
-- ``after_seq`` (the input it read; 0: anywhere).
SELECT content FROM messages
 WHERE conversation_id = :conversation_id AND seq > :after_seq AND run_id = :run_id
   AND role = 'assistant' AND tool_calls IS NULL
 ORDER BY seq DESC
 LIMIT 1;

-- ============================================================================================
-- Questions (B15): what an MCP server asks a person, decided once
-- ============================================================================================

-- insert_question --
-- The same question asked again (its ask_key: a call's or a task's request) is the one row.
INSERT INTO questions (question_id, conversation_id, run_id, task_id, asker, kind, ask_key,
                       message, requested_schema, status, requested_at_us, expires_at_us)
VALUES (:question_id, :conversation_id, :run_id, :task_id, :asker, :kind, :ask_key, :message,
        :requested_schema, 'pending', :now_us, :expires_at_us)
ON CONFLICT (ask_key) DO NOTHING;

-- get_question --
SELECT * FROM questions WHERE question_id = :question_id;

-- question_by_key --
SELECT * FROM questions WHERE ask_key = :ask_key;

-- decide_question --
-- Only a pending question is decided: a decision is never overwritten.
UPDATE questions SET status = :status, answer = :answer, decided_by = :decided_by,
                     decided_at_us = :now_us
 WHERE question_id = :question_id AND status = 'pending'
RETURNING question_id;

-- deliver_question --
-- The answer reached the one who asked (once).
UPDATE questions SET delivered_at_us = :now_us
 WHERE question_id = :question_id AND delivered_at_us IS NULL AND status <> 'pending';

-- expire_due_questions --
UPDATE questions SET status = 'expired', decided_at_us = :now_us
 WHERE status = 'pending' AND expires_at_us <= :now_us
RETURNING question_id, conversation_id, run_id;

-- expire_run_questions --
-- The run that waits on them ended: no answer can reach its call any more.
UPDATE questions SET status = 'expired', decided_at_us = :now_us
 WHERE run_id = :run_id AND status = 'pending'
RETURNING question_id, conversation_id;

-- expire_task_questions --
-- The task that asked ended (or was lost, or cancelled).
UPDATE questions SET status = 'expired', decided_at_us = :now_us
 WHERE task_id = :task_id AND status = 'pending'
RETURNING question_id, conversation_id;

-- conversation_questions --
SELECT * FROM questions
 WHERE conversation_id = :conversation_id AND (:status = '' OR status = :status)
 ORDER BY requested_at_us DESC, question_id DESC
 LIMIT :limit;

-- ============================================================================================
-- MCP outages (B4): who was told a server is not there, to be told once it is back
-- ============================================================================================

-- tell_mcp_outage --
-- A conversation heard the server is not there (``disconnected``, a refusal, or a call that
-- failed for it), in the commit that told it. Told again, it keeps the first time.
INSERT INTO mcp_outage_told (server, conversation_id, told_at_us)
VALUES (:server, :conversation_id, :now_us)
ON CONFLICT (server, conversation_id) DO NOTHING;

-- mcp_outage_told --
-- One page of the conversations told of the server's outage, by id after ``after``.
SELECT conversation_id FROM mcp_outage_told
 WHERE server = :server AND conversation_id > :after
 ORDER BY conversation_id
 LIMIT :limit;

-- forget_mcp_outage_told --
-- The conversation hears the server is back: whoever deletes the row tells it, once.
DELETE FROM mcp_outage_told WHERE server = :server AND conversation_id = :conversation_id
RETURNING conversation_id;

-- ============================================================================================
-- OAuth for MCP servers over HTTP: each server's tokens and client registration, sealed under
-- the master key by tidings/mcp/oauth.py (the columns never hold them in the clear)
-- ============================================================================================

-- mcp_oauth_get --
SELECT server, url, tokens, client_info, updated_at_us FROM mcp_oauth WHERE server = :server;

-- mcp_oauth_put_tokens --
-- Kept for the server's URL: a row written for another URL loses its registration with it.
INSERT INTO mcp_oauth (server, url, tokens, client_info, updated_at_us)
VALUES (:server, :url, :tokens, NULL, :now_us)
ON CONFLICT (server) DO UPDATE
   SET tokens = excluded.tokens, updated_at_us = excluded.updated_at_us,
       client_info = CASE WHEN mcp_oauth.url = excluded.url THEN mcp_oauth.client_info END,
       url = excluded.url;

-- mcp_oauth_put_client --
INSERT INTO mcp_oauth (server, url, tokens, client_info, updated_at_us)
VALUES (:server, :url, NULL, :client_info, :now_us)
ON CONFLICT (server) DO UPDATE
   SET client_info = excluded.client_info, updated_at_us = excluded.updated_at_us,
       tokens = CASE WHEN mcp_oauth.url = excluded.url THEN mcp_oauth.tokens END,
       url = excluded.url;

-- mcp_oauth_forget --
DELETE FROM mcp_oauth WHERE server = :server;

-- ============================================================================================
-- A2A push-notification configs (P1): what a principal asked to be told of a task, kept for
-- the delivery worker (P3)
-- ============================================================================================

-- put_push_config --
-- Create, or replace the one of the same id: A2A's create is an upsert by config id.
INSERT INTO a2a_push_configs (task_id, owner, config_id, conversation_id, url, token,
                              auth_scheme, auth_credentials, created_at_us)
VALUES (:task_id, :owner, :config_id, :conversation_id, :url, :token, :auth_scheme,
        :auth_credentials, :now_us)
ON CONFLICT (task_id, owner, config_id) DO UPDATE
   SET url = excluded.url, token = excluded.token, auth_scheme = excluded.auth_scheme,
       auth_credentials = excluded.auth_credentials;

-- push_config --
SELECT * FROM a2a_push_configs
 WHERE task_id = :task_id AND owner = :owner AND config_id = :config_id;

-- push_configs_of_task --
-- One page of a principal's configs for a task, by id after ``after``.
SELECT * FROM a2a_push_configs
 WHERE task_id = :task_id AND owner = :owner AND config_id > :after
 ORDER BY config_id
 LIMIT :limit;

-- push_configs_to_deliver --
-- Every config of a task, whoever registered it: what a delivery reads (P3).
SELECT * FROM a2a_push_configs WHERE task_id = :task_id ORDER BY owner, config_id;

-- delete_push_config --
DELETE FROM a2a_push_configs
 WHERE task_id = :task_id AND owner = :owner AND config_id = :config_id
RETURNING config_id;

-- ============================================================================================
-- Remote children (P5)
-- ============================================================================================

-- insert_remote_child --
-- Written with the child request, before anything is sent: the ids the message will carry.
INSERT INTO remote_children (request_id, agent, message_id, context_id, message, remote_task_id,
                             instance_id, created_at_us)
VALUES (:request_id, :agent, :message_id, :context_id, :message, :remote_task_id, :instance_id,
        :now_us);

-- insert_remote_child_hook --
-- The token the agent is given to push the request's news with, written with the request.
INSERT INTO remote_child_hooks (request_id, token) VALUES (:request_id, :token);

-- remote_child_sent --
-- The agent answered the message: its task (and the context it is in), recorded once.
UPDATE remote_children
   SET remote_task_id = :remote_task_id, remote_state = :remote_state, sent_at_us = :now_us,
       context_id = :context_id
 WHERE request_id = :request_id AND sent_at_us IS NULL;

-- remote_child_own_context --
-- The agent refused the context chosen for the message (it opens its own contexts): written
-- before the message goes without one, so that a crash in between is never taken for "not sent".
UPDATE remote_children SET context_id = ''
 WHERE request_id = :request_id AND sent_at_us IS NULL;

-- remote_child_state --
-- The remote task's state as last seen, while it is followed (for whoever looks).
UPDATE remote_children SET remote_state = :remote_state
 WHERE request_id = :request_id AND ended_at_us IS NULL;

-- end_remote_child --
-- The remote task was followed to its end (or cancelled): nothing more to follow.
UPDATE remote_children SET ended_at_us = :now_us, remote_state = :remote_state
 WHERE request_id = :request_id AND ended_at_us IS NULL;

-- remote_child_hook --
-- What a push hint is checked against: the token the agent was given.
SELECT token FROM remote_child_hooks WHERE request_id = :request_id;

-- remote_child --
SELECT r.*, c.state, c.kind, c.input_id, c.parent_conversation_id, c.child_conversation_id,
       c.task_key, h.token AS hook_token
  FROM remote_children r JOIN child_requests c ON c.request_id = r.request_id
  LEFT JOIN remote_child_hooks h ON h.request_id = r.request_id
 WHERE r.request_id = :request_id;

-- last_remote_child_of --
-- A remote child conversation's newest request (a send continues its context, or its task).
SELECT r.*, c.state, c.input_id, c.parent_conversation_id, c.child_conversation_id, c.task_key
  FROM remote_children r JOIN child_requests c ON c.request_id = r.request_id
 WHERE c.child_conversation_id = :child_conversation_id
 ORDER BY r.created_at_us DESC, r.request_id DESC
 LIMIT 1;

-- followed_remote_children --
-- The remote tasks an instance follows, to their end or their cancel.
SELECT request_id, agent, instance_id FROM remote_children
 WHERE instance_id = :instance_id AND ended_at_us IS NULL
 ORDER BY created_at_us;

-- orphaned_remote_children --
-- Remote tasks followed by an instance that is gone: the work runs on at the agent.
SELECT r.request_id, r.agent, r.instance_id
  FROM remote_children r JOIN instances i ON i.instance_id = r.instance_id
 WHERE r.ended_at_us IS NULL AND r.instance_id <> :instance_id
   AND (i.stopped_at_us IS NOT NULL OR i.reconciled_at_us IS NOT NULL)
 ORDER BY r.created_at_us
 LIMIT :limit;

-- adopt_remote_child --
-- A live instance takes over following a remote task; only one can (the row names the gone one).
UPDATE remote_children SET instance_id = :instance_id
 WHERE request_id = :request_id AND instance_id = :gone_instance_id AND ended_at_us IS NULL;

-- ============================================================================================
-- A2A push deliveries (P3): written by the trigger of migration 0019 with the journal event
-- ============================================================================================

-- claim_push_deliveries --
-- The head of each config's queue (its oldest pending delivery), when due and its config is
-- still there, leased: in order per config, never two of one config at once. A leased row's
-- claimable_at_us is its lease's deadline, so an attempt that died is due again after it. The
-- state and due time are checked again under the row's lock: two claimers lease it once.
UPDATE a2a_push_deliveries
   SET state = 'leased', lease_token = :token, lease_deadline_us = :deadline_us,
       claimable_at_us = :deadline_us, attempts = attempts + 1
 WHERE delivery_id IN (
        SELECT d.delivery_id FROM a2a_push_deliveries d
          JOIN a2a_push_configs c
            ON c.task_id = d.task_id AND c.owner = d.owner AND c.config_id = d.config_id
         WHERE d.state IN ('ready', 'leased') AND d.claimable_at_us <= :now_us
           AND NOT EXISTS (
                SELECT 1 FROM a2a_push_deliveries e
                 WHERE e.task_id = d.task_id AND e.owner = d.owner
                   AND e.config_id = d.config_id AND e.state IN ('ready', 'leased')
                   AND e.delivery_id < d.delivery_id)
         ORDER BY d.delivery_id
         LIMIT :limit)
   AND state IN ('ready', 'leased') AND claimable_at_us <= :now_us
RETURNING *;

-- push_targets --
-- The configs the claimed deliveries go to, as they stand now (a replaced URL or token is
-- used from the next attempt on).
SELECT c.* FROM a2a_push_configs c
 WHERE EXISTS (SELECT 1 FROM a2a_push_deliveries d
                WHERE d.lease_token = :token AND d.task_id = c.task_id AND d.owner = c.owner
                  AND d.config_id = c.config_id);

-- ack_push_delivery --
UPDATE a2a_push_deliveries
   SET state = 'delivered', lease_token = NULL, lease_deadline_us = NULL,
       settled_at_us = :now_us, failure_code = NULL
 WHERE delivery_id = :delivery_id AND lease_token = :token AND state = 'leased'
RETURNING delivery_id;

-- release_push_delivery --
-- A failed attempt: back to ready after its backoff, or dead_letter (settled) past the budget.
UPDATE a2a_push_deliveries
   SET state = CAST(:state AS text), lease_token = NULL, lease_deadline_us = NULL,
       claimable_at_us = :claimable_at_us, failure_code = :failure_code,
       settled_at_us = CASE WHEN CAST(:state AS text) = 'dead_letter' THEN :now_us END
 WHERE delivery_id = :delivery_id AND lease_token = :token AND state = 'leased'
RETURNING delivery_id, state;

-- void_push_deliveries --
-- A deleted config sends nothing more: its pending deliveries go with it (an attempt in
-- flight then finds no row to settle).
DELETE FROM a2a_push_deliveries
 WHERE task_id = :task_id AND owner = :owner AND config_id = :config_id
   AND state IN ('ready', 'leased');

-- push_watched_conversations --
-- The conversations whose journal can publish a push notification (they have a config).
SELECT DISTINCT conversation_id FROM a2a_push_configs;

-- next_push_due --
SELECT min(claimable_at_us) AS due FROM a2a_push_deliveries WHERE state IN ('ready', 'leased');

-- push_dead_letters --
SELECT delivery_id, task_id, owner, config_id, conversation_id, event_seq, event_type,
       attempts, failure_code, published_at_us, settled_at_us
  FROM a2a_push_deliveries
 WHERE state = 'dead_letter' AND delivery_id > :after
 ORDER BY delivery_id
 LIMIT :limit;

-- push_stats --
SELECT count(*) FILTER (WHERE state IN ('ready', 'leased')) AS pending,
       count(*) FILTER (WHERE state = 'leased') AS leased,
       count(*) FILTER (WHERE state = 'dead_letter') AS dead_letters,
       count(*) FILTER (WHERE state = 'delivered') AS delivered,
       min(CASE WHEN state IN ('ready', 'leased') THEN published_at_us END) AS oldest_pending_us
  FROM a2a_push_deliveries;

-- purge_push_delivered --
DELETE FROM a2a_push_deliveries
 WHERE delivery_id IN (SELECT delivery_id FROM a2a_push_deliveries
                        WHERE state = 'delivered' AND settled_at_us < :before_us
                        LIMIT :limit);

-- push_deliveries_of_task --
-- Diagnostics and tests: a task's deliveries, in order.
SELECT * FROM a2a_push_deliveries WHERE task_id = :task_id ORDER BY delivery_id;
