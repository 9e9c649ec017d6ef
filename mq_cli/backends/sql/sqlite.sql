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

-- name: create_meta
CREATE TABLE IF NOT EXISTS "{table}_meta" (name TEXT PRIMARY KEY, value TEXT NOT NULL)

-- name: write_version
INSERT OR IGNORE INTO "{table}_meta" (name, value) VALUES ('schema_version', ?)

-- name: schema_version
SELECT value FROM "{table}_meta" WHERE name = 'schema_version'

-- name: insert
INSERT INTO "{table}" (queue, priority, available_at, created_at, unique_key, payload)
VALUES {values}

-- name: insert_row
(?, ?, strftime('%Y-%m-%d %H:%M:%f', 'now', ?), strftime('%Y-%m-%d %H:%M:%f', 'now'), ?, ?)

-- name: purge_expired_key
-- A unique key whose tombstone has expired may be used again.
DELETE FROM "{table}"
WHERE queue = ? AND unique_key = ? AND status = 'done' AND available_at <= {now}

-- name: stats
SELECT queue,
       SUM(status = 'ready' AND available_at <= {now}),
       SUM(status = 'ready' AND available_at > {now}),
       SUM(status = 'processing'),
       SUM(status = 'failed'),
       (julianday('now') -
        julianday(MIN(CASE WHEN status = 'ready' AND available_at <= {now} THEN available_at END)))
       * 86400.0
FROM "{table}"
WHERE status IN ('ready', 'processing', 'failed') {queue_filter}
GROUP BY queue
ORDER BY queue

-- name: count_stalled
SELECT COUNT(*) FROM "{table}"
WHERE queue = ? AND status = 'processing'
  AND heartbeat_at < strftime('%Y-%m-%d %H:%M:%f', 'now', ?)

-- name: claim_select
-- Oldest ready messages of the highest priority, in index order. The caller
-- holds the write lock (BEGIN IMMEDIATE), so no other drain can take them.
SELECT id, queue, priority, error_count, created_at, available_at, unique_key, payload
FROM "{table}" INDEXED BY "{table}_claim"
WHERE queue = ? AND status = 'ready' AND available_at <= {now}
ORDER BY priority DESC, available_at, id
LIMIT ?

-- name: claim_mark
UPDATE "{table}" SET status = 'processing', owner = ?, heartbeat_at = {now}
WHERE id IN ({ids})

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

-- name: purge_tombstones
DELETE FROM "{table}" WHERE id IN (
  SELECT id FROM "{table}" WHERE queue = ? AND status = 'done' AND available_at <= {now} LIMIT 1000
)
