-- Every statement mq sends to SQLite. `{table}` is the validated table name;
-- `{ids}` and `{values}` are lists of placeholders built by the backend.
-- Times are UTC text 'YYYY-MM-DD HH:MM:SS.SSS' (sortable); `{now}` is
-- strftime('%Y-%m-%d %H:%M:%f', 'now') and `?` offsets are '+N seconds' modifiers.

-- name: create_table
CREATE TABLE IF NOT EXISTS "{table}" (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  queue TEXT NOT NULL,
  status TEXT NOT NULL DEFAULT 'ready',
  priority INTEGER NOT NULL DEFAULT 0,
  available_at TEXT NOT NULL,
  created_at TEXT NOT NULL,
  heartbeat_at TEXT,
  owner TEXT,
  error_count INTEGER NOT NULL DEFAULT 0,
  last_error TEXT,
  unique_key TEXT,
  payload BLOB NOT NULL
)

-- name: create_claim_index
-- The claim's WHERE and ORDER BY follow this index exactly.
CREATE INDEX IF NOT EXISTS "{table}_claim" ON "{table}" (queue, status, priority DESC, available_at, id)

-- name: create_unique_index
CREATE UNIQUE INDEX IF NOT EXISTS "{table}_unique" ON "{table}" (queue, unique_key)

-- name: create_due_index
-- Messages not due yet (a delay, a retry's backoff) wait with status 'delayed',
-- outside the claim's part of the claim index; drains make the due ones
-- 'ready' by this index (promote), so no claim walks past what it cannot take.
CREATE INDEX IF NOT EXISTS "{table}_due" ON "{table}" (queue, available_at)
WHERE status = 'delayed'

-- name: create_meta
CREATE TABLE IF NOT EXISTS "{table}_meta" (name TEXT PRIMARY KEY, value TEXT NOT NULL)

-- name: schema_version
SELECT value FROM "{table}_meta" WHERE name = 'schema_version'

-- name: insert
INSERT INTO "{table}" (queue, status, priority, available_at, created_at, unique_key, payload)
VALUES {values}

-- name: insert_one
INSERT INTO "{table}" (queue, status, priority, available_at, created_at, unique_key, payload)
VALUES (?, ?, ?, strftime('%Y-%m-%d %H:%M:%f', 'now', ?), strftime('%Y-%m-%d %H:%M:%f', 'now'), ?, ?)

-- name: insert_row
(?, ?, ?, strftime('%Y-%m-%d %H:%M:%f', 'now', ?), strftime('%Y-%m-%d %H:%M:%f', 'now'), ?, ?)

-- name: purge_expired_key
-- A unique key whose tombstone has expired may be used again.
DELETE FROM "{table}"
WHERE queue = ? AND unique_key = ? AND status = 'done' AND available_at <= {now}

-- name: stats
SELECT queue,
       SUM(status IN ('ready', 'delayed') AND available_at <= {now}),
       SUM(status IN ('ready', 'delayed') AND available_at > {now}),
       SUM(status = 'processing'),
       SUM(status = 'failed'),
       (julianday('now') -
        julianday(MIN(CASE WHEN status IN ('ready', 'delayed') AND available_at <= {now}
                         THEN available_at END)))
       * 86400.0
FROM "{table}"
WHERE status IN ('ready', 'delayed', 'processing', 'failed') {queue_filter}
GROUP BY queue
ORDER BY queue

-- name: queue_names
-- Every queue holding a row (a tombstone too), one index step each: a skip scan,
-- not a DISTINCT over the whole table (which reads every row at 10M).
WITH RECURSIVE q(name) AS (
  SELECT MIN(queue) FROM "{table}"
  UNION ALL
  SELECT (SELECT MIN(queue) FROM "{table}" WHERE queue > q.name) FROM q WHERE q.name IS NOT NULL
)
SELECT name FROM q WHERE name IS NOT NULL

-- name: stats_bounded
-- One queue's counts (ready, delayed, processing, failed), each read from an
-- index range and stopped after ? rows: the console's counts cost the same at
-- 10M rows as at 10k (backends/counts.py). A 'ready' row is due (stored due,
-- released keeping its due time); a due 'delayed' one is ready too.
SELECT
  (SELECT COUNT(*) FROM (SELECT 1 FROM "{table}" WHERE queue = ? AND status = 'ready' LIMIT ?))
  + (SELECT COUNT(*) FROM (SELECT 1 FROM "{table}"
                           WHERE queue = ? AND status = 'delayed' AND available_at <= {now} LIMIT ?)),
  (SELECT COUNT(*) FROM (SELECT 1 FROM "{table}"
                         WHERE queue = ? AND status = 'delayed' AND available_at > {now} LIMIT ?)),
  (SELECT COUNT(*) FROM (SELECT 1 FROM "{table}" WHERE queue = ? AND status = 'processing' LIMIT ?)),
  (SELECT COUNT(*) FROM (SELECT 1 FROM "{table}" WHERE queue = ? AND status = 'failed' LIMIT ?))

-- name: next_priority
-- The oldest ready message (counts.py) is the first of one priority's part of
-- the claim index: its priorities one index step each, highest first.
SELECT priority FROM "{table}" WHERE queue = ? AND status = 'ready' AND priority < ?
ORDER BY priority DESC LIMIT 1

-- name: first_ready_age
-- Seconds since the first ready message of a queue and priority became due.
SELECT (julianday('now') - julianday(available_at)) * 86400.0 FROM "{table}"
WHERE queue = ? AND status = 'ready' AND priority = ?
ORDER BY available_at LIMIT 1

-- name: rest_ready_age
-- The same for every priority below one (past counts.PRIORITIES of them).
SELECT (julianday('now') - julianday(MIN(available_at))) * 86400.0 FROM "{table}"
WHERE queue = ? AND status = 'ready' AND priority < ?

-- name: first_due_age
-- Seconds since the first due delayed message of a queue became due (the due index).
SELECT (julianday('now') - julianday(MIN(available_at))) * 86400.0 FROM "{table}"
WHERE queue = ? AND status = 'delayed' AND available_at <= {now}

-- name: id_span
-- Two subqueries: each is one step at an end of the primary key.
SELECT (SELECT MIN(id) FROM "{table}"), (SELECT MAX(id) FROM "{table}")

-- name: stats_sample
-- The counts of the rows with ids in [?, ?): one window of the sample that
-- estimates a count above the bound (backends/counts.py).
SELECT queue,
       SUM(status = 'ready' OR (status = 'delayed' AND available_at <= {now})),
       SUM(status = 'delayed' AND available_at > {now}),
       SUM(status = 'processing'),
       SUM(status = 'failed')
FROM "{table}"
WHERE id >= ? AND id < ?
GROUP BY queue

-- name: claim_select
-- Oldest ready messages of the highest priority, in index order. The caller
-- holds the write lock (BEGIN IMMEDIATE), so no other drain can take them.
SELECT id, queue, priority, error_count, created_at, available_at, unique_key, payload
FROM "{table}" INDEXED BY "{table}_claim"
WHERE queue = ? AND status = 'ready' AND available_at <= {now}
ORDER BY priority DESC, available_at, id
LIMIT ?

-- name: claim_mark
-- Guarded as on the other databases (the write lock makes it a formality here).
UPDATE "{table}" SET status = 'processing', owner = ?, heartbeat_at = {now}
WHERE id IN ({ids}) AND status = 'ready' AND owner IS NULL AND available_at <= {now}

-- name: explain_claim
EXPLAIN QUERY PLAN SELECT id FROM "{table}" INDEXED BY "{table}_claim"
WHERE queue = ? AND status = 'ready' AND available_at <= {now}
ORDER BY priority DESC, available_at, id
LIMIT ?

-- name: ack_delete
DELETE FROM "{table}" WHERE id = ? AND owner = ? AND status = 'processing'

-- name: ack_delete_many
DELETE FROM "{table}" WHERE id IN ({ids}) AND owner = ? AND status = 'processing'

-- name: ack_tombstone
-- A succeeded message with a unique key keeps its key (not its payload) until
-- the retention passes, so the same key enqueued again meanwhile is skipped.
UPDATE "{table}"
SET status = 'done', payload = X'', owner = NULL, heartbeat_at = NULL, last_error = NULL,
    available_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
WHERE id = ? AND owner = ? AND status = 'processing'

-- name: ack_failure
UPDATE "{table}"
SET status = ?, error_count = error_count + 1, last_error = ?, owner = NULL,
    heartbeat_at = NULL, available_at = strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
WHERE id = ? AND owner = ? AND status = 'processing'

-- name: heartbeat
UPDATE "{table}" SET heartbeat_at = {now}
WHERE id IN ({ids}) AND owner = ? AND status = 'processing'

-- name: release
-- Claimed but never started: back to ready, keeping their place in line.
UPDATE "{table}" SET status = 'ready', owner = NULL, heartbeat_at = NULL
WHERE id IN ({ids}) AND owner = ? AND status = 'processing'

-- name: promote
-- Due delayed messages become ready, a bounded batch (see create_due_index).
UPDATE "{table}" SET status = 'ready'
WHERE id IN (
  SELECT id FROM "{table}" INDEXED BY "{table}_due"
  WHERE queue = ? AND status = 'delayed' AND available_at <= {now}
  ORDER BY available_at
  LIMIT 1000
)

-- name: purge_tombstones
DELETE FROM "{table}" WHERE id IN (
  SELECT id FROM "{table}" WHERE queue = ? AND status = 'done' AND available_at <= {now} LIMIT 1000
)

-- Operators: gc, list, show, retry, delete, purge. A message row without its
-- payload is the "listed" columns: id, queue, status, priority, error_count,
-- created_at, available_at, unique_key, last_error, owner, heartbeat_at.
-- Tombstones (status 'done') are never listed, shown, counted or changed here.
-- Stalled bounds are '-N seconds' modifiers of now.

-- name: now
SELECT {now}

-- name: queues_with_status
-- A skip scan over the queues (see queue_names), then one index probe each:
-- not a DISTINCT over every row.
WITH RECURSIVE q(name) AS (
  SELECT MIN(queue) FROM "{table}"
  UNION ALL
  SELECT (SELECT MIN(queue) FROM "{table}" WHERE queue > q.name) FROM q WHERE q.name IS NOT NULL
)
SELECT name FROM q
WHERE name IS NOT NULL
  AND EXISTS (SELECT 1 FROM "{table}" WHERE queue = q.name AND status IN (?, ?))
ORDER BY name

-- name: list_all
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM "{table}"
WHERE queue = ? AND status IN ('ready', 'delayed', 'processing', 'failed') AND id > ?
ORDER BY id
LIMIT ?

-- name: list_status
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM "{table}"
WHERE queue = ? AND status IN (?, ?) AND id > ?
ORDER BY id
LIMIT ?

-- name: count_bounded
-- Whether a queue holds more than ? messages in these statuses, from the claim
-- index, stopped there: sqlops.list_messages picks the statements below then.
SELECT COUNT(*) FROM (SELECT 1 FROM "{table}" WHERE queue = ? AND status IN (?, ?, ?, ?) LIMIT ?)

-- name: list_all_by_id
-- list_all for a queue with many messages: along the primary key, skipping the
-- other rows, instead of sorting the queue's whole part of the claim index by id
-- (at 1M rows 0.5 s a page). SQLite keeps no statistics to choose so itself;
-- `+queue` keeps the claim index out.
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM "{table}"
WHERE +queue = ? AND status IN ('ready', 'delayed', 'processing', 'failed') AND id > ?
ORDER BY id
LIMIT ?

-- name: list_status_by_id
-- list_status for many messages, as list_all_by_id.
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM "{table}"
WHERE +queue = ? AND status IN (?, ?) AND id > ?
ORDER BY id
LIMIT ?

-- name: list_key
-- The live message of a queue with a unique key, if any: one step on the unique index.
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM "{table}"
WHERE queue = ? AND unique_key = ? AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: find_stalled
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM "{table}"
WHERE queue = ? AND status = 'processing'
  AND heartbeat_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
  AND id > ?
ORDER BY id
LIMIT ?

-- name: pick_stalled
-- Any stalled messages, in whatever order is cheapest: gc acts on these, which
-- then stop matching, so the next pick finds the next ones.
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM "{table}"
WHERE queue = ? AND status = 'processing'
  AND heartbeat_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
LIMIT ?

-- name: pick_failed
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM "{table}"
WHERE queue = ? AND status = 'failed'
LIMIT ?

-- name: lock_stalled
-- A gc batch first locks those of its ids that still match, then changes
-- exactly these (the change repeats the match too): what it reports changed is
-- what it changed, and a message that finished, heartbeated or was claimed
-- again meanwhile is left alone.
SELECT id, error_count FROM "{table}"
WHERE id IN ({ids}) AND queue = ? AND status = 'processing'
  AND heartbeat_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)

-- name: lock_failed
SELECT id FROM "{table}"
WHERE id IN ({ids}) AND queue = ? AND status = 'failed'

-- name: requeue_stalled_ready
-- Each gc action repeats its match, so a message that finished, heartbeated or
-- was claimed again since it was listed is not touched. A dead drain's message
-- (mark_dead) waits the grace (mq_cli/backends/liveness.py), delayed; SET reads old values.
UPDATE "{table}"
SET status = CASE WHEN heartbeat_at < '1970-01-02' THEN 'delayed' ELSE 'ready' END, last_error = ? || COALESCE(owner, 'unknown') || ?,
    error_count = error_count + 1, owner = NULL, heartbeat_at = NULL,
    available_at = CASE WHEN heartbeat_at < '1970-01-02'
                        THEN strftime('%Y-%m-%d %H:%M:%f', 'now', '+{grace} seconds')
                        ELSE {now} END
WHERE id IN ({ids}) AND queue = ? AND status = 'processing'
  AND heartbeat_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
  AND error_count + 1 < ?

-- name: requeue_stalled_failed
-- Requeuing a stalled message counts as a failure: at max_errors it is failed.
UPDATE "{table}"
SET status = 'failed', last_error = ? || COALESCE(owner, 'unknown') || ?,
    error_count = error_count + 1, owner = NULL, heartbeat_at = NULL, available_at = {now}
WHERE id IN ({ids}) AND queue = ? AND status = 'processing'
  AND heartbeat_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)
  AND error_count + 1 >= ?

-- name: delete_stalled
DELETE FROM "{table}"
WHERE id IN ({ids}) AND queue = ? AND status = 'processing'
  AND heartbeat_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)

-- name: requeue_failed
UPDATE "{table}"
SET status = 'ready', error_count = 0, owner = NULL, heartbeat_at = NULL, available_at = {now}
WHERE id IN ({ids}) AND queue = ? AND status = 'failed'

-- name: delete_failed
DELETE FROM "{table}" WHERE id IN ({ids}) AND queue = ? AND status = 'failed'

-- name: get_message
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at, payload
FROM "{table}"
WHERE id = ? AND status IN ('ready', 'delayed', 'processing', 'failed')

-- The console's finding (mq_cli/ops/columns.py, failures.py, search.py): reads
-- only, each bounded by a LIMIT the caller gives or by the ids it names.

-- name: payload_heads
-- The first bytes of each payload and its whole length: a preview never reads
-- a 50 MB payload into mq.
SELECT id, substr(payload, 1, ?), length(payload) FROM "{table}"
WHERE id IN ({ids}) AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: failure_groups
-- A queue's failed messages grouped by their error's key, over a sample: the
-- first `?` in the claim index's order (failed ones by priority, then by when
-- they failed: a failed row's available_at is that time). The key comes from one
-- line of last_error's last 400 characters: in a traceback (a line indented by
-- two spaces: a frame) the line after the last frame, where Python names the
-- exception (a message's further lines, a DETAIL, come after it); else the last
-- line. The key is that line up to its first ': ' (the exception's class) when
-- that comes within 100 characters, else its first 100 characters. Keys
-- differing only in case are one group: the console's error filter ignores
-- case. Per group: a key as stored, the key lowered, its count, oldest and
-- newest failure, newest id, and the sample's size.
-- SQLite has no "last line of": each newline becomes 400 spaces, so the last
-- 400 characters hold the last line and blanks only (the same for frames).
-- Each LIMIT -1 keeps SQLite from flattening a level into the next, which would
-- copy its expressions into each of their uses: 20 times the work.
SELECT MIN(k), lower(MIN(k)), COUNT(*) AS n, MIN(available_at), MAX(available_at), MAX(id),
       SUM(COUNT(*)) OVER ()
FROM (
  SELECT id, available_at,
         CASE WHEN instr(line, ': ') BETWEEN 2 AND 101 THEN substr(line, 1, instr(line, ': ') - 1)
              ELSE substr(line, 1, 100) END AS k
  FROM (
    SELECT id, available_at,
           trim(CASE WHEN instr(t, char(10) || '  ') > 0
                     THEN substr(r, 1, instr(r || char(10), char(10)) - 1)
                     ELSE substr(replace(t, char(10), printf('%400s', '')), -400) END) AS line
    FROM (
      SELECT id, available_at, t,
             CASE WHEN instr(seg, char(10)) > 0 THEN substr(seg, instr(seg, char(10)) + 1)
                  ELSE seg END AS r
      FROM (
        SELECT id, available_at, t,
               ltrim(substr(replace(t, char(10) || '  ', printf('%400s', '')), -400)) AS seg
        FROM (
          SELECT id, available_at,
                 rtrim(substr(COALESCE(last_error, ''), -400), char(9, 10, 13, 32)) AS t
          FROM "{table}" INDEXED BY "{table}_claim"
          WHERE queue = ? AND status = 'failed'
          ORDER BY priority DESC, available_at, id
          LIMIT ?
        ) AS tails LIMIT -1
      ) AS segments LIMIT -1
    ) AS rests LIMIT -1
  ) AS sample LIMIT -1
) AS keyed
GROUP BY lower(k) ORDER BY n DESC, MIN(k) LIMIT ?

-- name: failure_matches
-- How many messages of the same sample hold each key (lowered) anywhere in
-- last_error: what the error filter would select. `{matches}` is one
-- failure_match per key.
SELECT {matches}
FROM (
  SELECT lower(COALESCE(last_error, '')) AS error
  FROM "{table}" INDEXED BY "{table}_claim"
  WHERE queue = ? AND status = 'failed'
  ORDER BY priority DESC, available_at, id
  LIMIT ?
) AS sample

-- name: failure_match
SUM(instr(error, ?) > 0)

-- name: search_ids
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM "{table}"
WHERE id IN ({ids}) AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: search_queues
-- Every queue holding a row, one index seek each (a loose index scan).
WITH RECURSIVE q(name) AS (
  SELECT MIN(queue) FROM "{table}"
  UNION ALL
  SELECT (SELECT MIN(queue) FROM "{table}" WHERE queue > q.name) FROM q WHERE q.name IS NOT NULL
)
SELECT name FROM q WHERE name IS NOT NULL LIMIT ?

-- name: search_key
-- A unique key in one queue, by the unique index.
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM "{table}"
WHERE queue = ? AND unique_key = ? AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: search_window
-- The rows an error search looks at: the next `?` ids after one, by the primary key.
SELECT MAX(id), COUNT(*) FROM (SELECT id FROM "{table}" WHERE id > ? ORDER BY id LIMIT ?)

-- name: search_error
-- Live messages of a window whose last_error holds the text (given lowered).
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM "{table}"
WHERE id > ? AND id <= ? AND status IN ('ready', 'delayed', 'processing', 'failed')
  AND instr(lower(last_error), ?) > 0
ORDER BY id
LIMIT ?

-- name: lock_ids
-- retry/delete by id, inside BEGIN IMMEDIATE: what is refused (processing) and
-- what is changed are decided on the same state.
SELECT id, status, owner FROM "{table}"
WHERE id IN ({ids}) AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: retry_ids
UPDATE "{table}"
SET status = 'ready', error_count = 0, owner = NULL, heartbeat_at = NULL, available_at = {now}
WHERE id IN ({ids}) AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: delete_ids
DELETE FROM "{table}" WHERE id IN ({ids}) AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: last_id
SELECT MAX(id) FROM "{table}" WHERE queue = ?

-- name: last_id_any
-- The table's last id, on its primary key: a confirmation's bound (nothing enqueued
-- after it is acted on) without reading a queue's every row.
SELECT MAX(id) FROM "{table}"

-- name: purge_live
-- A bounded batch of a queue's messages, up to the last id when purge started
-- (so a producer's new messages are not chased).
DELETE FROM "{table}" WHERE id IN (
  SELECT id FROM "{table}"
  WHERE queue = ? AND status IN ('ready', 'delayed', 'processing', 'failed') AND id <= ? LIMIT ?
)

-- name: purge_status
-- One status, or 'done': the tombstones of unique keys.
DELETE FROM "{table}" WHERE id IN (
  SELECT id FROM "{table}" WHERE queue = ? AND status IN (?, ?) AND id <= ? LIMIT ?
)

-- name: purge_due
-- A bounded batch of a queue's messages that are ready now (`mq list --status
-- ready`), under either stored status; delayed ones stay (ready never includes them).
DELETE FROM "{table}" WHERE id IN (
  SELECT id FROM "{table}"
  WHERE queue = ? AND status IN ('ready', 'delayed') AND available_at <= {now} AND id <= ? LIMIT ?
)

-- name: purge_delayed
-- A bounded batch of a queue's messages not due yet (`mq list --status delayed`):
-- scheduled, or backing off after a failure.
DELETE FROM "{table}" WHERE id IN (
  SELECT id FROM "{table}"
  WHERE queue = ? AND status IN ('ready', 'delayed') AND available_at > {now} AND id <= ? LIMIT ?
)

-- name: owned
-- Which of these messages this drain still holds (after a pause, or a lost reply).
SELECT id FROM "{table}" WHERE id IN ({ids}) AND owner = ? AND status = 'processing'

-- name: release_owner
-- After a claim whose outcome is unknown: whatever that claim took goes back.
UPDATE "{table}" SET status = 'ready', owner = NULL, heartbeat_at = NULL
WHERE queue = ? AND status = 'processing' AND owner = ?

-- name: release_owner_keeping
-- The same while the drain holds others on the queue (a claim made ahead of the
-- batch it runs): those stay its own.
UPDATE "{table}" SET status = 'ready', owner = NULL, heartbeat_at = NULL
WHERE queue = ? AND status = 'processing' AND owner = ? AND id NOT IN ({ids})

-- Schema shape and migrations (backends/schema.py): what `mq init` repairs and
-- what every command checks once before it reads or writes messages.
-- `mq init` runs in one transaction (backends/sqlschema.py): BEGIN IMMEDIATE
-- takes the write lock, so a second init (any command's, on first use) waits
-- for the first and then finds its work done; no init_lock statement here.

-- name: table_columns
-- Each column, and no schema to name (the file is the database).
SELECT name, NULL FROM pragma_table_info(?)

-- name: table_indexes
SELECT name, "unique" FROM pragma_index_list(?)

-- name: set_version
INSERT INTO "{table}_meta" (name, value) VALUES ('schema_version', ?)
ON CONFLICT (name) DO UPDATE SET value = excluded.value

-- name: add_column_status
-- Columns a damaged table may have lost, each with a default for its rows. A
-- message's queue, payload or id cannot be made up: those are not here.
ALTER TABLE "{table}" ADD COLUMN status TEXT NOT NULL DEFAULT 'ready'

-- name: add_column_priority
ALTER TABLE "{table}" ADD COLUMN priority INTEGER NOT NULL DEFAULT 0

-- name: add_column_available_at
ALTER TABLE "{table}" ADD COLUMN available_at TEXT NOT NULL DEFAULT '1970-01-01 00:00:00.000'

-- name: add_column_created_at
ALTER TABLE "{table}" ADD COLUMN created_at TEXT NOT NULL DEFAULT '1970-01-01 00:00:00.000'

-- name: add_column_heartbeat_at
ALTER TABLE "{table}" ADD COLUMN heartbeat_at TEXT

-- name: add_column_owner
ALTER TABLE "{table}" ADD COLUMN owner TEXT

-- name: add_column_error_count
ALTER TABLE "{table}" ADD COLUMN error_count INTEGER NOT NULL DEFAULT 0

-- name: add_column_last_error
ALTER TABLE "{table}" ADD COLUMN last_error TEXT

-- name: add_column_unique_key
ALTER TABLE "{table}" ADD COLUMN unique_key TEXT

-- name: add_claim_index
CREATE INDEX IF NOT EXISTS "{table}_claim" ON "{table}" (queue, status, priority DESC, available_at, id)

-- name: add_due_index
CREATE INDEX IF NOT EXISTS "{table}_due" ON "{table}" (queue, available_at)
WHERE status = 'delayed'

-- name: migrate_3_delayed
UPDATE "{table}" SET status = 'delayed' WHERE status = 'ready' AND available_at > {now}

-- name: add_unique_index
CREATE UNIQUE INDEX IF NOT EXISTS "{table}_unique" ON "{table}" (queue, unique_key)

-- name: probe_write
-- `mq check`: a row no drain could claim (a queue name mq never accepts),
-- inserted inside a transaction that is always rolled back.
INSERT INTO "{table}" (queue, available_at, created_at, payload)
VALUES ('mq check probe', {now}, {now}, X'')

-- name: quick_check
PRAGMA quick_check(5)

-- Clock steps (mq_cli/host/clock.py): each drain start, heartbeat and gc records
-- the database's now per host; a jump between two of them that the host's
-- boot clock did not see is a step, and stalled detection waits it out.

-- name: clock_read
SELECT {now},
       (SELECT created_at FROM "{table}" ORDER BY id DESC LIMIT 1),
       (SELECT value FROM "{table}_meta" WHERE name = 'clock_seen'),
       (SELECT value FROM "{table}_meta" WHERE name = 'clock_step'),
       (SELECT value FROM "{table}_meta" WHERE name = ?)

-- name: clock_step
SELECT {now}, (SELECT value FROM "{table}_meta" WHERE name = 'clock_step')

-- name: meta_put
INSERT INTO "{table}_meta" (name, value) VALUES (?, ?)
ON CONFLICT (name) DO UPDATE SET value = excluded.value

-- name: clock_repair_back
-- After the clock went back: a ready message created "in the future" was
-- stored before the step. Move its times back so that it is as old as it was
-- at least (created now, its delay kept), instead of hidden for the step's size.
UPDATE "{table}"
SET available_at = strftime('%Y-%m-%d %H:%M:%f',
        julianday(available_at) - (julianday(created_at) - julianday('now'))),
    created_at = {now}
WHERE status IN ('ready', 'delayed') AND created_at > {now}

-- name: meta_notes
-- What a drain reads as it starts. Paused queues (`mq pause`): 'paused:QUEUE',
-- or 'paused#HASH' for a long name, the value "since|QUEUE"; queues no drain
-- could start (mq_cli/drain/startfail.py): 'nostart:QUEUE' or 'nostart#HASH', the
-- value "since|QUEUE|error".
SELECT name, value FROM "{table}_meta" WHERE substr(name, 1, 7) IN ('paused:', 'paused#', 'nostart')

-- name: meta_delete
DELETE FROM "{table}_meta" WHERE name = ?

-- name: probe
SELECT 1

-- name: processing_owners
SELECT DISTINCT owner FROM "{table}" WHERE queue = ? AND status = 'processing' LIMIT 1000

-- name: mark_dead
-- Its drain's lock file is free (and held by the caller meanwhile): stalled now.
UPDATE "{table}" SET heartbeat_at = '1970-01-01 00:00:00.000'
WHERE queue = ? AND status = 'processing' AND owner = ?

-- name: owner_counts
-- Per owner: processing messages, and of them those with an old heartbeat.
SELECT owner, COUNT(*),
       SUM(heartbeat_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?))
FROM "{table}" WHERE queue = ? AND status = 'processing'
GROUP BY owner

-- The run log (mq_cli/drain/runlog.py): one row per drain run, one per run, queue
-- and time slice of its results. Its times are Unix seconds of the database's
-- clock (REAL), as the drain measured them; wait and duration histograms are
-- text (mq_cli/host/runlog.Histogram).

-- name: create_runs
CREATE TABLE IF NOT EXISTS "{table}_runs" (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  owner TEXT NOT NULL,
  host TEXT NOT NULL,
  pid INTEGER NOT NULL,
  queues TEXT NOT NULL,
  queue TEXT,
  started_at REAL NOT NULL,
  seen_at REAL NOT NULL,
  ended_at REAL,
  claimed INTEGER NOT NULL DEFAULT 0,
  succeeded INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0,
  returned INTEGER NOT NULL DEFAULT 0,
  exit_code INTEGER,
  running_id INTEGER,
  running_since REAL,
  stop_request TEXT,
  stop_by TEXT,
  stop_at REAL,
  end_reason TEXT
)

-- name: create_runs_index
CREATE INDEX IF NOT EXISTS "{table}_ru_at" ON "{table}_runs" (seen_at)

-- name: create_rollup
CREATE TABLE IF NOT EXISTS "{table}_rollup" (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  run_id INTEGER,
  queue TEXT NOT NULL,
  slice_start REAL NOT NULL,
  slice_end REAL NOT NULL,
  done INTEGER NOT NULL DEFAULT 0,
  failed INTEGER NOT NULL DEFAULT 0,
  backlog INTEGER,
  wait_sum REAL NOT NULL DEFAULT 0,
  duration_sum REAL NOT NULL DEFAULT 0,
  wait_hist TEXT NOT NULL DEFAULT '',
  duration_hist TEXT NOT NULL DEFAULT ''
)

-- name: create_rollup_index
CREATE INDEX IF NOT EXISTS "{table}_ro_end" ON "{table}_rollup" (slice_end)

-- name: runs_insert
INSERT INTO "{table}_runs" (owner, host, pid, queues, queue, started_at, seen_at)
VALUES (?, ?, ?, ?, ?, ?, ?)

-- name: runs_update
UPDATE "{table}_runs"
SET seen_at = ?, ended_at = ?, exit_code = ?, queue = ?, claimed = ?, succeeded = ?,
    failed = ?, returned = ?, running_id = ?, running_since = ?,
    end_reason = ?
WHERE id = ?

-- name: rollup_insert
INSERT INTO "{table}_rollup" (run_id, queue, slice_start, slice_end, done, failed, backlog,
                              wait_sum, duration_sum, wait_hist, duration_hist)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- name: runs_purge
DELETE FROM "{table}_runs" WHERE id IN (
  SELECT id FROM "{table}_runs" WHERE seen_at < ? LIMIT 1000
)

-- name: rollup_purge
DELETE FROM "{table}_rollup" WHERE id IN (
  SELECT id FROM "{table}_rollup" WHERE slice_end < ? LIMIT 1000
)

-- name: runs_probe
-- Whether this user may read the table (`mq check`, `mq status`, `mq stats
-- --prometheus`): it reads no row.
SELECT id FROM "{table}_runs" WHERE 1 = 0

-- name: rollup_probe
SELECT id FROM "{table}_rollup" WHERE 1 = 0

-- name: runs_live
SELECT id, owner, host, pid, queues, queue, started_at, seen_at, ended_at, claimed, succeeded,
       failed, returned, exit_code, running_id, running_since, stop_request, stop_by,
       stop_at, end_reason
FROM "{table}_runs" WHERE ended_at IS NULL AND seen_at >= ? ORDER BY started_at, id

-- name: runs_recent
SELECT id, owner, host, pid, queues, queue, started_at, seen_at, ended_at, claimed, succeeded,
       failed, returned, exit_code, running_id, running_since, stop_request, stop_by,
       stop_at, end_reason
FROM "{table}_runs" ORDER BY id DESC LIMIT ?

-- name: runs_request
-- A drain's look for an operator's request (`mq stop`): one row by its key, every
-- couple of seconds at most (drain/requests.py).
SELECT stop_request, stop_by FROM "{table}_runs" WHERE id = ?

-- name: runs_ask_stop
-- `mq stop`: only a run not ended yet; a stop is never turned back into a quiet.
-- Its last ? is the request's kind again.
UPDATE "{table}_runs" SET stop_request = ?, stop_by = ?, stop_at = ?
WHERE id = ? AND ended_at IS NULL
  AND (? = 'stop' OR stop_request IS NULL OR stop_request <> 'stop')

-- The run log's columns added by schema version 5 (an operator's stop request, why a
-- run ended), each on its own: SQLite adds one column per statement.
-- name: runs_add_stop_request
ALTER TABLE "{table}_runs" ADD COLUMN stop_request TEXT

-- name: runs_add_stop_by
ALTER TABLE "{table}_runs" ADD COLUMN stop_by TEXT

-- name: runs_add_stop_at
ALTER TABLE "{table}_runs" ADD COLUMN stop_at REAL

-- name: runs_add_end_reason
ALTER TABLE "{table}_runs" ADD COLUMN end_reason TEXT

-- name: rollup_since
SELECT queue, slice_start, slice_end, done, failed, wait_sum, duration_sum, wait_hist,
       duration_hist
FROM "{table}_rollup" WHERE slice_end >= ? AND backlog IS NULL

-- name: rollup_totals
SELECT queue, SUM(done), SUM(failed) FROM "{table}_rollup" GROUP BY queue ORDER BY queue

-- name: rollup_series
-- Per queue and step of ? seconds: done, failed, the largest backlog sampled.
SELECT queue, CAST(slice_end / ? AS INTEGER) AS step, SUM(done), SUM(failed), MAX(backlog)
FROM "{table}_rollup" WHERE slice_end >= ?
GROUP BY queue, step ORDER BY queue, step

-- name: held_by_owner
SELECT owner, COUNT(*) FROM "{table}" WHERE queue = ? AND status = 'processing' GROUP BY owner

-- Fleet limits (mq_cli/host/fleet.py holds max_drains with lock files: no table;
-- mq_cli/drain/ratelimit.py). Times are Unix seconds of the host's clock, as REAL.

-- name: create_slots
-- Unused on SQLite (lock files hold its fleet slots); made so every backend has
-- the same tables.
CREATE TABLE IF NOT EXISTS "{table}_slots" (
  queue TEXT NOT NULL,
  slot INTEGER NOT NULL,
  owner TEXT,
  heartbeat_at REAL NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, slot)
)

-- name: create_rates
-- rate_limit: one token bucket per queue.
CREATE TABLE IF NOT EXISTS "{table}_rates" (
  queue TEXT NOT NULL PRIMARY KEY,
  per_second REAL NOT NULL,
  tokens REAL NOT NULL,
  updated_at REAL NOT NULL,
  granted INTEGER NOT NULL DEFAULT 0,
  throttled REAL NOT NULL DEFAULT 0
)

-- name: slot_seed
INSERT OR IGNORE INTO "{table}_slots" (queue, slot, owner, heartbeat_at) VALUES (?, ?, NULL, 0)

-- name: slot_take
UPDATE "{table}_slots" SET owner = ?, heartbeat_at = (julianday('now') - 2440587.5) * 86400.0
WHERE queue = ? AND slot = ?
  AND (owner IS NULL OR heartbeat_at < (julianday('now') - 2440587.5) * 86400.0 - ?)

-- name: slot_keep
UPDATE "{table}_slots" SET heartbeat_at = (julianday('now') - 2440587.5) * 86400.0
WHERE queue = ? AND slot = ? AND owner = ?

-- name: slot_release
UPDATE "{table}_slots" SET owner = NULL, heartbeat_at = 0 WHERE queue = ? AND slot = ? AND owner = ?

-- name: slots_in_use
SELECT COUNT(*) FROM "{table}_slots"
WHERE queue = ? AND slot < ? AND owner IS NOT NULL
  AND heartbeat_at >= (julianday('now') - 2440587.5) * 86400.0 - ?

-- name: rate_take
-- Refill by the time elapsed (at most `cap` tokens), grant up to `want` whole
-- tokens (CAST truncates: the same as FLOOR for these non-negative amounts);
-- every SET expression sees the row as it was.
INSERT INTO "{table}_rates" AS b (queue, per_second, tokens, updated_at, granted, throttled)
VALUES (:queue, :rate, :tokens0, (julianday('now') - 2440587.5) * 86400.0, :grant0, :slept)
ON CONFLICT (queue) DO UPDATE SET
  granted = min(:want, CAST(min(:cap,
    b.tokens + excluded.per_second * max(0, excluded.updated_at - b.updated_at)) AS INTEGER)),
  tokens = min(:cap, b.tokens + excluded.per_second * max(0, excluded.updated_at - b.updated_at))
    - min(:want, CAST(min(:cap,
      b.tokens + excluded.per_second * max(0, excluded.updated_at - b.updated_at)) AS INTEGER)),
  updated_at = max(b.updated_at, excluded.updated_at),
  per_second = excluded.per_second,
  throttled = b.throttled + excluded.throttled
RETURNING granted, tokens

-- name: rate_read
SELECT granted, tokens FROM "{table}_rates" WHERE queue = ?

-- name: rate_refund
UPDATE "{table}_rates" SET tokens = tokens + ? WHERE queue = ?

-- name: rate_state
SELECT per_second, min(max(per_second, 1), tokens + per_second * max(0,
         (julianday('now') - 2440587.5) * 86400.0 - updated_at)),
       throttled
FROM "{table}_rates" WHERE queue = ?

-- name: ready_exists
-- Ready messages, or due delayed ones not promoted yet (each through its index).
SELECT 1 FROM "{table}" WHERE queue = ? AND status = 'ready' AND available_at <= {now}
UNION ALL
SELECT 1 FROM "{table}" WHERE queue = ? AND status = 'delayed' AND available_at <= {now}
LIMIT 1

-- name: free_pages
-- `mq check` (backends/bloat.py): the file's pages, how many are free (left by
-- deleted rows: reused, never given back without auto_vacuum), their size.
SELECT page_count, freelist_count, page_size
FROM pragma_page_count(), pragma_freelist_count(), pragma_page_size()

-- name: ids_present
-- After an enqueue's COMMIT whose answer was lost: how many of its rows are there.
SELECT COUNT(*) FROM "{table}" WHERE id IN ({ids})
