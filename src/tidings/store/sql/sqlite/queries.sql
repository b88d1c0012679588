-- SQLite's own named queries and fragments: only what cannot be written the way
-- ../common/queries.sql writes it (a block here replaces the common one of the same name).
-- Lists arrive as JSON text, opened with json_each(). ../postgres/queries.sql defines the same
-- names with the same result shapes.

-- lock_migrations --
-- The migrating transaction began with BEGIN IMMEDIATE: it already holds the write lock.
SELECT 1;

-- create_migration_ledger --
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);

-- unreconciled_instances --
SELECT instance_id, stopped_at_us, heartbeat_at_us FROM instances
 WHERE reconciled_at_us IS NULL AND instance_id != :instance_id
 ORDER BY started_at_us;

-- invalidate_leases --
-- "state IN (...)" lets SQLite walk the unsettled rows' partial index, not the whole history.
UPDATE signal_deliveries
   SET state = 'ready', lease_deadline_us = NULL, claimable_at_us = :now_us,
       failure_code = 'instance_gone'
 WHERE state IN ('ready', 'leased') AND state = 'leased' AND lease_instance = :instance_id;

-- accept_operation --
-- Only a running instance accepts (one declared gone inserts nothing).
INSERT INTO operations
    (operation_id, kind, owner, origin_instance, idempotency_key, state, accepted_at_us)
SELECT :operation_id, :kind, :owner, :origin_instance, :idempotency_key, 'accepted', :now_us
 WHERE EXISTS (SELECT 1 FROM instances
                WHERE instance_id = :origin_instance AND stopped_at_us IS NULL)
ON CONFLICT (owner, idempotency_key) DO NOTHING;
SELECT * FROM operations WHERE owner = :owner AND idempotency_key = :idempotency_key;

-- accept_new_operation --
-- An operation with no idempotency key of its caller's (its own id stands for one, so no other
-- can hold it): one row written, or none when the instance was declared gone.
INSERT INTO operations
    (operation_id, kind, owner, origin_instance, idempotency_key, state, accepted_at_us)
SELECT :operation_id, :kind, :owner, :origin_instance, :operation_id, 'accepted', :now_us
 WHERE EXISTS (SELECT 1 FROM instances
                WHERE instance_id = :origin_instance AND stopped_at_us IS NULL);

-- publish --
-- Admission and the per-conversation sequence share the queue row; a duplicate key or a full
-- backlog changes nothing and returns no row. (A conversation without a queue row has no
-- events, so a first publish needs no duplicate check.) The delivery is written by the trigger
-- signal_events_deliver.
INSERT INTO signal_queues (conversation_id, last_seq, backlog) VALUES (:conversation_id, 1, 1)
ON CONFLICT (conversation_id) DO UPDATE SET last_seq = last_seq + 1, backlog = backlog + 1
 WHERE backlog < :backlog_limit
   AND NOT EXISTS (SELECT 1 FROM signal_events
                    WHERE conversation_id = :conversation_id
                      AND idempotency_key = :idempotency_key);
INSERT INTO signal_events (event_id, type, operation_id, conversation_id, idempotency_key,
                           payload, payload_bytes, schema_version, published_at_us)
SELECT :event_id, :type, :operation_id, :conversation_id, :idempotency_key,
       :payload, :payload_bytes, :schema_version, :now_us
 WHERE changes() = 1
RETURNING 'created' AS outcome, seq, event_id, seq AS delivery_id,
          (SELECT q.backlog FROM signal_queues q
            WHERE q.conversation_id IN (signal_events.conversation_id)) AS backlog;

-- claim --
-- The candidates, read: head-bounded, sequence-ordered, at most max_count, each with its event
-- (attempts as they will be once leased). The caller cuts the batch to max_bytes (the first
-- always fits) and leases it with claim_lease. One writer at a time: nothing moves between the
-- two statements. leased = 0 says the rows are not leased yet (PostgreSQL's claim leases them
-- in the same statement).
SELECT d.delivery_id, d.event_id, e.seq, d.queue_seq, e.type, e.operation_id, d.conversation_id,
       e.payload, d.payload_bytes, e.schema_version, d.attempts + 1 AS attempts,
       d.published_at_us, 0 AS leased
  FROM signal_deliveries d
 CROSS JOIN signal_events e ON e.seq = d.delivery_id
 WHERE d.conversation_id = :conversation_id
   AND d.state IN ('ready', 'leased')
   AND d.queue_seq >= coalesce((SELECT head_seq FROM signal_queues
                                 WHERE conversation_id = :conversation_id), 0)
   AND d.claimable_at_us <= :now_us
   AND d.attempts < :max_attempts
   AND EXISTS (SELECT 1 FROM instances
                WHERE instance_id = :instance_id AND stopped_at_us IS NULL)
 ORDER BY d.queue_seq
 LIMIT :max_count;

-- extend --
UPDATE signal_deliveries SET lease_deadline_us = :deadline_us, claimable_at_us = :deadline_us
 WHERE delivery_id IN (SELECT value FROM json_each(:delivery_ids))
   AND lease_token = :token AND state = 'leased' AND lease_deadline_us > :now_us
RETURNING delivery_id;

-- ack --
-- The whole lease, all or nothing: its deliveries are those of its token in its sequence span.
-- Unless every one of them (expected) is still leased under this unexpired token, nothing
-- changes and the queue update reports no row. Then the queue's head and backlog move; the head
-- only moves forward, to the lowest unsettled sequence (docs/architecture.md, "Keeping the queue
-- head clean").
UPDATE signal_deliveries
   SET state = 'acknowledged', settled_at_us = :now_us, lease_deadline_us = NULL,
       claimable_at_us = 0
 WHERE conversation_id = :conversation_id AND state IN ('ready', 'leased')
   AND queue_seq BETWEEN :first_seq AND :last_seq
   AND lease_token = :token AND state = 'leased' AND lease_deadline_us > :now_us
   AND (SELECT count(*) FROM signal_deliveries
         WHERE conversation_id = :conversation_id AND state IN ('ready', 'leased')
           AND queue_seq BETWEEN :first_seq AND :last_seq
           AND lease_token = :token AND state = 'leased'
           AND lease_deadline_us > :now_us) = :expected;
{ack_settle};

-- ack_listed --
-- Some of a lease's deliveries, all or nothing, as ack.
UPDATE signal_deliveries
   SET state = 'acknowledged', settled_at_us = :now_us, lease_deadline_us = NULL,
       claimable_at_us = 0
 WHERE delivery_id IN (SELECT value FROM json_each(:delivery_ids))
   AND lease_token = :token AND state = 'leased' AND lease_deadline_us > :now_us
   AND (SELECT count(*) FROM signal_deliveries
         WHERE delivery_id IN (SELECT value FROM json_each(:delivery_ids))
           AND lease_token = :token AND state = 'leased'
           AND lease_deadline_us > :now_us) = :expected;
{ack_settle};

-- {ack_settle} --
-- The queue row after an ack, changed only when the ack's UPDATE took all it expected (so the
-- ack's answer is 1, or 0 when stale). Past the head's next unsettled sequence, or last_seq + 1.
UPDATE signal_queues
   SET backlog = backlog - :expected,
       head_seq = max(head_seq, coalesce(
           (SELECT min(d.queue_seq) FROM signal_deliveries d
             WHERE d.conversation_id = :conversation_id AND d.state IN ('ready', 'leased')
               AND d.queue_seq >= signal_queues.head_seq),
           :last_seq + 1))
 WHERE conversation_id = :conversation_id AND changes() = :expected

-- release --
UPDATE signal_deliveries
   SET state = r.state, claimable_at_us = r.claimable_at_us, failure_code = r.failure_code,
       lease_deadline_us = NULL,
       settled_at_us = CASE WHEN r.state = 'dead_letter' THEN :now_us END
  FROM (SELECT json_extract(value, '$.delivery_id') AS delivery_id,
               json_extract(value, '$.state') AS state,
               json_extract(value, '$.claimable_at_us') AS claimable_at_us,
               json_extract(value, '$.failure_code') AS failure_code
          FROM json_each(:items)) AS r
 WHERE signal_deliveries.delivery_id = r.delivery_id
   AND signal_deliveries.lease_token = :token
   AND signal_deliveries.state = 'leased'
   AND signal_deliveries.lease_deadline_us > :now_us
RETURNING signal_deliveries.delivery_id, signal_deliveries.state;

-- {purgeable_event} --
-- Which acknowledged events purge_acknowledged may delete. The newest event is never purged,
-- so the journal sequence (max(seq) + 1) never goes back; it goes at the next purge after a
-- newer event exists.
seq < (SELECT max(seq) FROM signal_events)

-- delivery_states --
SELECT delivery_id, state, attempts, lease_token, lease_deadline_us, failure_code
  FROM signal_deliveries
 WHERE delivery_id IN (SELECT value FROM json_each(:delivery_ids))
 ORDER BY delivery_id;

-- dead_letters --
SELECT d.delivery_id, d.event_id, d.conversation_id, e.type, d.attempts, d.failure_code,
       d.published_at_us, d.settled_at_us
  FROM signal_deliveries d INDEXED BY signal_deliveries_dead
  JOIN signal_events e ON e.seq = d.delivery_id
 WHERE d.state = 'dead_letter'
   AND (:conversation_id IS NULL OR d.conversation_id = :conversation_id)
 ORDER BY d.delivery_id
 LIMIT :limit;

-- ============================================================================================
-- Conversations, the door, runs, the transcript and the journal (C, M1-M3, S7)
-- ============================================================================================

-- insert_events --
INSERT INTO events (conversation_id, seq, type, run_id, data, at_us)
SELECT :conversation_id, json_extract(value, '$.seq'), json_extract(value, '$.type'),
       json_extract(value, '$.run_id'), json_extract(value, '$.data'), :now_us
  FROM json_each(:items);

-- messages_by_seq --
-- The transcript messages a page of the journal names (its message_committed events).
SELECT * FROM messages
 WHERE conversation_id = :conversation_id AND seq IN (SELECT value FROM json_each(:seqs))
 ORDER BY seq;

-- inputs_content_by_id --
-- The text of the inputs a page of the journal announces (its input_accepted events). Found by
-- their ids: the unary + keeps SQLite from walking every input of the conversation instead.
SELECT input_id, content FROM inputs
 WHERE +conversation_id = :conversation_id AND input_id IN (SELECT value FROM json_each(:input_ids));

-- journal_heads --
-- How far each watched conversation's journal has come: the feed's slow poll, one query for
-- every conversation a process watches.
SELECT conversation_id, last_event_seq, status FROM conversations
 WHERE conversation_id IN (SELECT value FROM json_each(:conversation_ids));

-- ============================================================================================
-- Child conversations (M16, M17)
-- ============================================================================================

-- mark_children_relayed --
-- The relay's marker, for a parent's replies at once: only those not relayed yet come back
-- (a sweep and a kick that raced: each reply is marked, and so relayed, once).
UPDATE child_requests SET relayed_at_us = :now_us
 WHERE request_id IN (SELECT value FROM json_each(:request_ids)) AND relayed_at_us IS NULL
RETURNING request_id;
