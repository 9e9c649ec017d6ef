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
