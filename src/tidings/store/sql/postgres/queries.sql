-- PostgreSQL's own named queries and fragments: only what cannot be written the way
-- ../common/queries.sql writes it (a block here replaces the common one of the same name).
-- Lists arrive as arrays. ../sqlite/queries.sql defines the same names with the same result
-- shapes. The hot path (publish, claim, ack) is one statement each: every statement is a round
-- trip.

-- lock_migrations --
-- Concurrent openers of one database migrate one at a time (released at commit).
SELECT pg_advisory_xact_lock(7311001);

-- create_migration_ledger --
CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- unreconciled_instances --
SELECT instance_id, stopped_at_us, heartbeat_at_us FROM instances
 WHERE reconciled_at_us IS NULL AND instance_id != :instance_id
 ORDER BY started_at_us
   FOR UPDATE SKIP LOCKED;

-- invalidate_leases --
UPDATE signal_deliveries
   SET state = 'ready', lease_deadline_us = NULL, claimable_at_us = :now_us,
       failure_code = 'instance_gone'
 WHERE state = 'leased' AND lease_instance = :instance_id;

-- accept_operation --
-- Only a running instance accepts: the instance row is share-locked, so a reconcile that
-- declares it gone either waits for this transaction (and then finds the operation) or has
-- already committed (and then nothing is inserted). No row when the instance is gone or a
-- concurrent transaction won the key after this statement's snapshot: the caller then reads
-- it with operation_by_key.
WITH running AS (
    SELECT instance_id FROM instances
     WHERE instance_id = :origin_instance AND stopped_at_us IS NULL
       FOR SHARE
), inserted AS (
    INSERT INTO operations
        (operation_id, kind, owner, origin_instance, idempotency_key, state, accepted_at_us)
    SELECT :operation_id, :kind, :owner, :origin_instance, :idempotency_key, 'accepted', :now_us
      FROM running
    ON CONFLICT (owner, idempotency_key) DO NOTHING
    RETURNING *
)
SELECT * FROM inserted
UNION ALL
SELECT * FROM operations
 WHERE owner = :owner AND idempotency_key = :idempotency_key
   AND NOT EXISTS (SELECT 1 FROM inserted);

-- accept_new_operation --
-- An operation with no idempotency key of its caller's (its own id stands for one, so no other
-- can hold it): one row written, or none when the instance was declared gone. The instance row
-- is share-locked as above; nothing is read back, so the write can go with the unit's others.
INSERT INTO operations
    (operation_id, kind, owner, origin_instance, idempotency_key, state, accepted_at_us)
SELECT :operation_id, :kind, :owner, :origin_instance, :operation_id, 'accepted', :now_us
  FROM instances
 WHERE instance_id = :origin_instance AND stopped_at_us IS NULL
   FOR SHARE;

-- publish --
-- One statement. The queue row is locked first (upsert), so per-conversation sequences are
-- allocated in commit order. A full backlog or a duplicate key returns no 'created' row;
-- 'admitted_only' means a concurrent duplicate won the key after admission (the caller undoes
-- the admission in the same transaction). Listeners are notified only when the queue was empty.
WITH q AS (
    INSERT INTO signal_queues AS q (conversation_id, last_seq, backlog)
    VALUES (:conversation_id, 1, 1)
    ON CONFLICT (conversation_id) DO UPDATE
       SET last_seq = q.last_seq + 1, backlog = q.backlog + 1
     WHERE q.backlog < :backlog_limit
       AND NOT EXISTS (SELECT 1 FROM signal_events
                        WHERE conversation_id = :conversation_id
                          AND idempotency_key = :idempotency_key)
    RETURNING q.last_seq, q.backlog
), ev AS (
    INSERT INTO signal_events (event_id, type, operation_id, conversation_id, idempotency_key,
                               payload, payload_bytes, schema_version, published_at_us)
    SELECT :event_id, :type, :operation_id, :conversation_id, :idempotency_key,
           :payload, :payload_bytes, :schema_version, :now_us
      FROM q
    ON CONFLICT (conversation_id, idempotency_key) DO NOTHING
    RETURNING seq, event_id
), dl AS (
    INSERT INTO signal_deliveries (event_id, conversation_id, queue_seq, state, attempts,
                                   claimable_at_us, payload_bytes, published_at_us)
    SELECT ev.event_id, :conversation_id, q.last_seq, 'ready', 0, :now_us, :payload_bytes,
           :now_us
      FROM ev, q
    RETURNING delivery_id, event_id
), woken AS (
    SELECT pg_notify('tidings_signals', :conversation_id) FROM q WHERE q.backlog = 1
)
SELECT 'created' AS outcome, ev.seq, ev.event_id, dl.delivery_id, q.backlog,
       (SELECT count(*) FROM woken) AS woken
  FROM ev JOIN dl ON dl.event_id = ev.event_id, q
UNION ALL
SELECT 'admitted_only', NULL, NULL, NULL, q.backlog, 0
  FROM q WHERE NOT EXISTS (SELECT 1 FROM ev);

-- claim --
-- One statement: head-bounded, sequence-ordered, bounded in count and bytes (the first always
-- fits); rows another claimer holds are skipped, never waited for.
WITH picked AS (
    SELECT d.delivery_id, d.payload_bytes, d.queue_seq
      FROM signal_deliveries d
     WHERE d.conversation_id = :conversation_id
       AND d.state IN ('ready', 'leased')
       AND d.queue_seq >= coalesce((SELECT q.head_seq FROM signal_queues q
                                     WHERE q.conversation_id = :conversation_id), 0)
       AND d.claimable_at_us <= :now_us
       AND d.attempts < :max_attempts
       AND EXISTS (SELECT 1 FROM instances i
                    WHERE i.instance_id = :instance_id AND i.stopped_at_us IS NULL)
     ORDER BY d.queue_seq
     LIMIT :max_count
       FOR UPDATE SKIP LOCKED
), sized AS (
    SELECT delivery_id,
           sum(payload_bytes) OVER (ORDER BY queue_seq) AS running,
           row_number() OVER (ORDER BY queue_seq) AS position
      FROM picked
), leased AS (
    UPDATE signal_deliveries d
       SET state = 'leased', lease_token = :token, lease_deadline_us = :deadline_us,
           claimable_at_us = :deadline_us, lease_instance = :instance_id, lease_owner = :owner,
           attempts = d.attempts + 1
      FROM sized
     WHERE d.delivery_id = sized.delivery_id
       AND (sized.running <= :max_bytes OR sized.position = 1)
    RETURNING d.delivery_id, d.event_id, d.queue_seq, d.conversation_id, d.payload_bytes,
              d.attempts, d.published_at_us
)
SELECT l.delivery_id, l.event_id, e.seq, l.queue_seq, e.type, e.operation_id, l.conversation_id,
       e.payload, l.payload_bytes, e.schema_version, l.attempts, l.published_at_us,
       1 AS leased
  FROM leased l JOIN signal_events e ON e.event_id = l.event_id
 ORDER BY l.queue_seq;

-- extend --
UPDATE signal_deliveries SET lease_deadline_us = :deadline_us, claimable_at_us = :deadline_us
 WHERE delivery_id = ANY(:delivery_ids::bigint[])
   AND lease_token = :token AND state = 'leased' AND lease_deadline_us > :now_us
RETURNING delivery_id;

-- ack --
-- One statement, all or nothing: unless every delivery of the lease (expected: those of its
-- token in its sequence span) is still leased under this unexpired token, nothing changes and
-- no row is returned; otherwise one row. Then the queue's head and backlog move. The head only
-- moves forward, to the lowest unsettled sequence this statement can see. A publisher whose row
-- this snapshot misses holds the queue row lock, and its sequence was allocated after every
-- committed one, so it is above any head computed here (docs/architecture.md, "Keeping the
-- queue head clean").
WITH held AS (
    SELECT delivery_id FROM signal_deliveries
     WHERE conversation_id = :conversation_id AND state IN ('ready', 'leased')
       AND queue_seq BETWEEN :first_seq AND :last_seq
       AND lease_token = :token AND state = 'leased' AND lease_deadline_us > :now_us
       FOR UPDATE
), {ack_settle};

-- ack_listed --
-- Some of a lease's deliveries, all or nothing, as ack.
WITH held AS (
    SELECT delivery_id FROM signal_deliveries
     WHERE delivery_id = ANY(:delivery_ids::bigint[])
       AND lease_token = :token AND state = 'leased' AND lease_deadline_us > :now_us
       FOR UPDATE
), {ack_settle};

-- {ack_settle} --
-- The rest of an ack after its held CTE: acknowledge, then move the queue row.
acked AS (
    UPDATE signal_deliveries
       SET state = 'acknowledged', settled_at_us = :now_us, lease_deadline_us = NULL,
           claimable_at_us = 0
     WHERE delivery_id IN (SELECT delivery_id FROM held)
       AND (SELECT count(*) FROM held) = :expected
    RETURNING delivery_id, queue_seq
), settled AS (
    UPDATE signal_queues q
       SET backlog = q.backlog - (SELECT count(*) FROM acked),
           head_seq = greatest(q.head_seq, coalesce(
               (SELECT min(d.queue_seq) FROM signal_deliveries d
                 WHERE d.conversation_id = :conversation_id AND d.state IN ('ready', 'leased')
                   AND d.queue_seq >= q.head_seq
                   AND d.delivery_id NOT IN (SELECT delivery_id FROM acked)),
               (SELECT max(queue_seq) + 1 FROM acked)))
     WHERE q.conversation_id = :conversation_id AND EXISTS (SELECT 1 FROM acked)
    RETURNING q.conversation_id
)
SELECT conversation_id FROM settled

-- release --
UPDATE signal_deliveries d
   SET state = r.state, claimable_at_us = r.claimable_at_us, failure_code = r.failure_code,
       lease_deadline_us = NULL,
       settled_at_us = CASE WHEN r.state = 'dead_letter' THEN :now_us::bigint END
  FROM jsonb_to_recordset(:items::jsonb)
       AS r (delivery_id bigint, state text, claimable_at_us bigint, failure_code text)
 WHERE d.delivery_id = r.delivery_id
   AND d.lease_token = :token
   AND d.state = 'leased'
   AND d.lease_deadline_us > :now_us
RETURNING d.delivery_id, d.state;

-- {purgeable_event} --
-- Which acknowledged events purge_acknowledged may delete: any, since seq is an identity
-- column, which never goes back.
TRUE

-- delivery_states --
SELECT delivery_id, state, attempts, lease_token, lease_deadline_us, failure_code
  FROM signal_deliveries
 WHERE delivery_id = ANY(:delivery_ids::bigint[])
 ORDER BY delivery_id;

-- dead_letters --
SELECT d.delivery_id, d.event_id, d.conversation_id, e.type, d.attempts, d.failure_code,
       d.published_at_us, d.settled_at_us
  FROM signal_deliveries d JOIN signal_events e ON e.event_id = d.event_id
 WHERE d.state = 'dead_letter'
   AND (:conversation_id::text IS NULL OR d.conversation_id = :conversation_id)
 ORDER BY d.delivery_id
 LIMIT :limit;

-- ============================================================================================
-- Conversations, the door, runs, the transcript and the journal (C, M1-M3, S7)
-- ============================================================================================

-- lock_conversation --
-- The row lock serialises every writer of this conversation until the transaction ends.
{conversation_row}
   FOR UPDATE OF c;

-- insert_events --
-- The feed's journal hint rides in the same statement: a NOTIFY is sent when (and only if)
-- the transaction commits, to every process listening, this one included (store/feed.py).
WITH inserted AS (
    INSERT INTO events (conversation_id, seq, type, run_id, data, at_us)
    SELECT :conversation_id, e.seq, e.type, e.run_id, e.data, :now_us
      FROM jsonb_to_recordset(:items::jsonb) AS e (seq bigint, type text, run_id text, data text)
    RETURNING seq
)
SELECT pg_notify('tidings_feed', 'j ' || CAST(:conversation_id AS text) || ' ' || max(seq))
  FROM inserted;

-- messages_by_seq --
-- The transcript messages a page of the journal names (its message_committed events).
SELECT * FROM messages
 WHERE conversation_id = :conversation_id AND seq = ANY(:seqs::bigint[])
 ORDER BY seq;

-- inputs_content_by_id --
-- The text of the inputs a page of the journal announces (its input_accepted events).
SELECT input_id, content FROM inputs
 WHERE conversation_id = :conversation_id AND input_id = ANY(:input_ids::text[]);

-- journal_heads --
-- How far each watched conversation's journal has come: the feed's slow poll, one query for
-- every conversation a process watches.
SELECT conversation_id, last_event_seq, status FROM conversations
 WHERE conversation_id = ANY(:conversation_ids::text[]);

-- ============================================================================================
-- Child conversations (M16, M17)
-- ============================================================================================

-- mark_children_relayed --
-- The relay's marker, for a parent's replies at once: only those not relayed yet come back
-- (a sweep and a kick that raced: each reply is marked, and so relayed, once).
UPDATE child_requests SET relayed_at_us = :now_us
 WHERE request_id = ANY(:request_ids::text[]) AND relayed_at_us IS NULL
RETURNING request_id;
