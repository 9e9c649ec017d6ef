-- Every statement mq sends to MySQL/MariaDB. `{table}` is the validated table
-- name; `{ids}` and `{values}` are lists of placeholders built by the backend.
-- All times are the server's UTC clock (UTC_TIMESTAMP), never the host's.

-- name: create_table
CREATE TABLE IF NOT EXISTS `{table}` (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  status VARCHAR(10) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'ready',
  priority INT NOT NULL DEFAULT 0,
  available_at DATETIME(6) NOT NULL,
  created_at DATETIME(6) NOT NULL,
  heartbeat_at DATETIME(6) NULL,
  owner VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL,
  error_count INT NOT NULL DEFAULT 0,
  last_error TEXT NULL,
  -- Bytes, not a collation: 'k' and 'k ' are different keys, as in SQLite.
  unique_key VARBINARY(1020) NULL,
  -- Galera certifies every write by the values of each unique index, and a
  -- (queue, NULL) pair counts: one index over (queue, unique_key) made every
  -- write to a queue conflict with every concurrent write from another node.
  -- This column is NULL when there is no key, and NULL values are not certified.
  unique_slot VARBINARY(1090) AS (CONCAT(queue, ':', unique_key)) STORED,
  payload LONGBLOB NOT NULL,
  PRIMARY KEY (id),
  -- The claim's WHERE and ORDER BY follow this index exactly, so a claim reads
  -- and locks only the rows it takes (see FIELD-NOTES, trap 1).
  KEY `{table}_claim` (queue, status, priority DESC, available_at, id),
  -- Messages not due yet (a delay, a retry's backoff) wait with status
  -- 'delayed', outside the claim's part of the claim index; drains make the
  -- due ones 'ready' by this index (promote), so no claim walks past them.
  KEY `{table}_due` (queue, status, available_at),
  UNIQUE KEY `{table}_unique` (unique_slot)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4

-- name: create_meta
CREATE TABLE IF NOT EXISTS `{table}_meta` (
  name VARCHAR(64) CHARACTER SET ascii NOT NULL PRIMARY KEY,
  value VARCHAR(255) NOT NULL
) ENGINE=InnoDB

-- name: schema_version
SELECT value FROM `{table}_meta` WHERE name = 'schema_version'

-- name: session_settings
-- A handler may run for its whole timeout between two statements of a drain:
-- a short server wait_timeout would drop the idle connection each time (and
-- log a reconnect that cron mails). 8 h, the usual default, unless longer.
SET SESSION wait_timeout = GREATEST(@@session.wait_timeout, 28800)

-- name: server_info
-- @@wsrep_on exists on MariaDB (a Galera node when ON), not on MySQL.
SELECT VERSION(), @@max_allowed_packet, @@auto_increment_increment, @@innodb_autoinc_lock_mode,
       @@wsrep_on, @@version_comment

-- name: server_info_mysql
SELECT VERSION(), @@max_allowed_packet, @@auto_increment_increment, @@innodb_autoinc_lock_mode, 0,
       @@version_comment

-- name: galera_status
SHOW STATUS WHERE Variable_name IN
  ('wsrep_cluster_size', 'wsrep_local_state_comment', 'wsrep_cluster_status')

-- name: insert_returning
-- MariaDB >= 10.5: the new ids come back in the order of the rows.
INSERT INTO `{table}` (queue, status, priority, available_at, created_at, unique_key, payload)
VALUES {values} RETURNING id

-- name: insert
INSERT INTO `{table}` (queue, status, priority, available_at, created_at, unique_key, payload)
VALUES {values}

-- name: insert_one
INSERT INTO `{table}` (queue, status, priority, available_at, created_at, unique_key, payload)
VALUES (%s, %s, %s, TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6), %s, %s)

-- name: insert_row
(%s, %s, %s, TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6), %s, %s)

-- name: purge_expired_key
-- A unique key whose tombstone has expired may be used again.
DELETE FROM `{table}`
WHERE unique_slot = CONCAT(%s, ':', %s) AND status = 'done' AND available_at <= UTC_TIMESTAMP(6)

-- name: stats
SELECT queue,
       SUM(status IN ('ready', 'delayed') AND available_at <= UTC_TIMESTAMP(6)),
       SUM(status IN ('ready', 'delayed') AND available_at > UTC_TIMESTAMP(6)),
       SUM(status = 'processing'),
       SUM(status = 'failed'),
       TIMESTAMPDIFF(MICROSECOND,
           MIN(CASE WHEN status IN ('ready', 'delayed') AND available_at <= UTC_TIMESTAMP(6)
                    THEN available_at END),
           UTC_TIMESTAMP(6)) / 1000000.0
FROM `{table}`
WHERE status IN ('ready', 'delayed', 'processing', 'failed') {queue_filter}
GROUP BY queue
ORDER BY queue

-- name: queue_names
-- Every queue holding a row (a tombstone too): GROUP BY on the due index's first
-- column is a loose index scan, one step a queue (the claim index's descending
-- part rules it out there), not a read of every row.
SELECT queue FROM `{table}` FORCE INDEX (`{table}_due`) GROUP BY queue

-- name: stats_bounded
-- One queue's counts (ready, delayed, processing, failed), each read from an
-- index range and stopped after %s rows: the console's counts cost the same at
-- 10M rows as at 10k (backends/counts.py). A 'ready' row is due (stored due,
-- released keeping its due time); a due 'delayed' one is ready too.
SELECT
  (SELECT COUNT(*) FROM (SELECT 1 FROM `{table}` WHERE queue = %s AND status = 'ready' LIMIT %s) r)
  + (SELECT COUNT(*) FROM (SELECT 1 FROM `{table}`
                           WHERE queue = %s AND status = 'delayed'
                             AND available_at <= UTC_TIMESTAMP(6) LIMIT %s) d),
  (SELECT COUNT(*) FROM (SELECT 1 FROM `{table}`
                         WHERE queue = %s AND status = 'delayed'
                           AND available_at > UTC_TIMESTAMP(6) LIMIT %s) l),
  (SELECT COUNT(*) FROM (SELECT 1 FROM `{table}` WHERE queue = %s AND status = 'processing' LIMIT %s) p),
  (SELECT COUNT(*) FROM (SELECT 1 FROM `{table}` WHERE queue = %s AND status = 'failed' LIMIT %s) f)

-- name: next_priority
-- The oldest ready message (counts.py) is the first of one priority's part of
-- the claim index: its priorities one index step each, highest first.
SELECT priority FROM `{table}` WHERE queue = %s AND status = 'ready' AND priority < %s
ORDER BY priority DESC LIMIT 1

-- name: first_ready_age
-- Seconds since the first ready message of a queue and priority became due.
SELECT TIMESTAMPDIFF(MICROSECOND, available_at, UTC_TIMESTAMP(6)) / 1000000.0 FROM `{table}`
WHERE queue = %s AND status = 'ready' AND priority = %s
ORDER BY available_at LIMIT 1

-- name: rest_ready_age
-- The same for every priority below one (past counts.PRIORITIES of them).
SELECT TIMESTAMPDIFF(MICROSECOND, MIN(available_at), UTC_TIMESTAMP(6)) / 1000000.0 FROM `{table}`
WHERE queue = %s AND status = 'ready' AND priority < %s

-- name: first_due_age
-- Seconds since the first due delayed message of a queue became due (the due index).
SELECT TIMESTAMPDIFF(MICROSECOND, MIN(available_at), UTC_TIMESTAMP(6)) / 1000000.0 FROM `{table}`
WHERE queue = %s AND status = 'delayed' AND available_at <= UTC_TIMESTAMP(6)

-- name: id_span
-- Two subqueries: each is one step at an end of the primary key.
SELECT (SELECT MIN(id) FROM `{table}`), (SELECT MAX(id) FROM `{table}`)

-- name: stats_sample
-- The counts of the rows with ids in [%s, %s): one window of the sample that
-- estimates a count above the bound (backends/counts.py).
SELECT queue,
       SUM(status = 'ready' OR (status = 'delayed' AND available_at <= UTC_TIMESTAMP(6))),
       SUM(status = 'delayed' AND available_at > UTC_TIMESTAMP(6)),
       SUM(status = 'processing'),
       SUM(status = 'failed')
FROM `{table}`
WHERE id >= %s AND id < %s
GROUP BY queue

-- name: claim_select
-- Oldest ready messages of the highest priority, in index order, skipping rows
-- other drains hold: concurrent claims never wait on each other.
SELECT id, queue, priority, error_count, created_at, available_at, unique_key, payload
FROM `{table}` FORCE INDEX (`{table}_claim`)
WHERE queue = %s AND status = 'ready' AND available_at <= UTC_TIMESTAMP(6)
ORDER BY priority DESC, available_at, id
LIMIT %s
FOR UPDATE SKIP LOCKED

-- name: claim_select_locking
-- Servers without SKIP LOCKED: correct, but concurrent claims queue up.
SELECT id, queue, priority, error_count, created_at, available_at, unique_key, payload
FROM `{table}` FORCE INDEX (`{table}_claim`)
WHERE queue = %s AND status = 'ready' AND available_at <= UTC_TIMESTAMP(6)
ORDER BY priority DESC, available_at, id
LIMIT %s
FOR UPDATE

-- name: claim_mark
-- Guarded: only rows still ready, due and free are taken, so a claim whose
-- SELECT did not lock (an engine that ignores FOR UPDATE SKIP LOCKED) never
-- takes a row another drain marked first; its row count says how many it got.
UPDATE `{table}` SET status = 'processing', owner = %s, heartbeat_at = UTC_TIMESTAMP(6)
WHERE id IN ({ids}) AND status = 'ready' AND owner IS NULL
  AND available_at <= UTC_TIMESTAMP(6)

-- name: explain_claim
EXPLAIN SELECT id FROM `{table}` FORCE INDEX (`{table}_claim`)
WHERE queue = %s AND status = 'ready' AND available_at <= UTC_TIMESTAMP(6)
ORDER BY priority DESC, available_at, id
LIMIT %s

-- name: ack_delete
DELETE FROM `{table}` WHERE id = %s AND owner = %s AND status = 'processing'

-- name: ack_delete_many
DELETE FROM `{table}` WHERE id IN ({ids}) AND owner = %s AND status = 'processing'

-- name: ack_tombstone
-- A succeeded message with a unique key keeps its key (not its payload) until
-- the retention passes, so the same key enqueued again meanwhile is skipped.
UPDATE `{table}`
SET status = 'done', payload = '', owner = NULL, heartbeat_at = NULL, last_error = NULL,
    available_at = TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6))
WHERE id = %s AND owner = %s AND status = 'processing'

-- name: ack_failure
UPDATE `{table}`
SET status = %s, error_count = error_count + 1, last_error = %s, owner = NULL,
    heartbeat_at = NULL, available_at = TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6))
WHERE id = %s AND owner = %s AND status = 'processing'

-- name: heartbeat
UPDATE `{table}` SET heartbeat_at = UTC_TIMESTAMP(6)
WHERE id IN ({ids}) AND owner = %s AND status = 'processing'

-- name: release
-- Claimed but never started: back to ready, keeping their place in line.
UPDATE `{table}` SET status = 'ready', owner = NULL, heartbeat_at = NULL
WHERE id IN ({ids}) AND owner = %s AND status = 'processing'

-- name: promote
-- Due delayed messages become ready, a bounded batch in index order (see the
-- due index in create_table); every promoter goes in that order: no deadlock.
UPDATE `{table}` SET status = 'ready'
WHERE queue = %s AND status = 'delayed' AND available_at <= UTC_TIMESTAMP(6)
ORDER BY available_at
LIMIT 1000

-- name: purge_tombstones
DELETE FROM `{table}`
WHERE queue = %s AND status = 'done' AND available_at <= UTC_TIMESTAMP(6)
LIMIT 1000

-- Operators: gc, list, show, retry, delete, purge. A message row without its
-- payload is the "listed" columns: id, queue, status, priority, error_count,
-- created_at, available_at, unique_key, last_error, owner, heartbeat_at.
-- Tombstones (status 'done') are never listed, shown, counted or changed here.

-- name: now
SELECT UTC_TIMESTAMP(6)

-- name: queues_with_status
-- A loose index scan over the queues (see queue_names), then one index probe
-- each: not a DISTINCT over every row.
SELECT name FROM (SELECT queue AS name FROM `{table}` FORCE INDEX (`{table}_due`)
                  GROUP BY queue) q
WHERE EXISTS (SELECT 1 FROM `{table}` WHERE queue = q.name AND status IN (%s, %s))
ORDER BY name

-- name: list_all
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM `{table}`
WHERE queue = %s AND status IN ('ready', 'delayed', 'processing', 'failed') AND id > %s
ORDER BY id
LIMIT %s

-- name: list_status
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM `{table}`
WHERE queue = %s AND status IN (%s, %s) AND id > %s
ORDER BY id
LIMIT %s

-- name: list_key
-- The live message of a queue with a unique key, if any: one step on the unique
-- index (unique_slot is the queue and the key; a queue name has no ':').
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM `{table}`
WHERE unique_slot = CONCAT(%s, ':', %s) AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: find_stalled
-- Stalled: processing, heartbeat older than the bound (now + a negative number of
-- microseconds).
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM `{table}`
WHERE queue = %s AND status = 'processing'
  AND heartbeat_at < TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6))
  AND id > %s
ORDER BY id
LIMIT %s

-- name: pick_stalled
-- Any stalled messages, in whatever order is cheapest: gc acts on these, which
-- then stop matching, so the next pick finds the next ones (no ORDER BY sort
-- over a million rows per batch).
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM `{table}`
WHERE queue = %s AND status = 'processing'
  AND heartbeat_at < TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6))
LIMIT %s

-- name: pick_failed
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM `{table}`
WHERE queue = %s AND status = 'failed'
LIMIT %s

-- name: lock_stalled
-- A gc batch first locks those of its ids that still match, then changes
-- exactly these (the change repeats the match too): what it reports changed is
-- what it changed, and a message that finished, heartbeated or was claimed
-- again meanwhile is left alone.
SELECT id, error_count FROM `{table}`
WHERE id IN ({ids}) AND queue = %s AND status = 'processing'
  AND heartbeat_at < TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6))
FOR UPDATE

-- name: lock_failed
SELECT id FROM `{table}`
WHERE id IN ({ids}) AND queue = %s AND status = 'failed'
FOR UPDATE

-- name: requeue_stalled_ready
-- Each gc action repeats its match, so a message that finished, heartbeated or
-- was claimed again since it was listed is not touched. MySQL assigns left to
-- right, so last_error reads owner before owner is cleared, and available_at
-- reads heartbeat_at before it is: a dead drain's message (mark_dead) waits
-- the grace (mq_cli/backends/liveness.py) so its old run is surely over, delayed.
UPDATE `{table}`
SET status = IF(heartbeat_at < '1970-01-02', 'delayed', 'ready'), last_error = CONCAT(%s, COALESCE(owner, 'unknown'), %s),
    error_count = error_count + 1, owner = NULL,
    available_at = IF(heartbeat_at < '1970-01-02', TIMESTAMPADD(MICROSECOND,
                      {grace} * 1000000, UTC_TIMESTAMP(6)), UTC_TIMESTAMP(6)),
    heartbeat_at = NULL
WHERE id IN ({ids}) AND queue = %s AND status = 'processing'
  AND heartbeat_at < TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6))
  AND error_count + 1 < %s

-- name: requeue_stalled_failed
-- Requeuing a stalled message counts as a failure: at max_errors it is failed.
UPDATE `{table}`
SET status = 'failed', last_error = CONCAT(%s, COALESCE(owner, 'unknown'), %s),
    error_count = error_count + 1, owner = NULL, heartbeat_at = NULL,
    available_at = UTC_TIMESTAMP(6)
WHERE id IN ({ids}) AND queue = %s AND status = 'processing'
  AND heartbeat_at < TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6))
  AND error_count + 1 >= %s

-- name: delete_stalled
DELETE FROM `{table}`
WHERE id IN ({ids}) AND queue = %s AND status = 'processing'
  AND heartbeat_at < TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6))

-- name: requeue_failed
UPDATE `{table}`
SET status = 'ready', error_count = 0, owner = NULL, heartbeat_at = NULL,
    available_at = UTC_TIMESTAMP(6)
WHERE id IN ({ids}) AND queue = %s AND status = 'failed'

-- name: delete_failed
DELETE FROM `{table}` WHERE id IN ({ids}) AND queue = %s AND status = 'failed'

-- name: get_message
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at, payload
FROM `{table}`
WHERE id = %s AND status IN ('ready', 'delayed', 'processing', 'failed')

-- The console's finding (mq_cli/ops/columns.py, failures.py, search.py): reads
-- only, each bounded by a LIMIT the caller gives or by the ids it names.

-- name: payload_heads
-- The first bytes of each payload and its whole length: a preview never sends
-- a 50 MB payload to mq.
SELECT id, SUBSTRING(payload, 1, %s), LENGTH(payload) FROM `{table}`
WHERE id IN ({ids}) AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: failure_groups
-- A queue's failed messages grouped by their error's key, over a sample: the
-- first `%s` in the claim index's order (failed ones by priority, then by when
-- they failed: a failed row's available_at is that time). The key comes from one
-- line of last_error's last 400 characters: in a traceback (a line indented by
-- two spaces: a frame) the line after the last frame, where Python names the
-- exception (a message's further lines, a DETAIL, come after it); else the last
-- line. The key is that line up to its first ': ' (the exception's class) when
-- that comes within 100 characters, else its first 100 characters. Keys
-- differing only in case are one group: the console's error filter ignores
-- case. Per group: a key as stored, the key lowered, its count, oldest and
-- newest failure, newest id, and the sample's size.
-- Each LIMIT 18446744073709551615 (all) keeps MariaDB from merging a level into
-- the next, which would copy its expressions into each of their uses.
SELECT MIN(k), LOWER(MIN(k)), COUNT(*) AS n, MIN(available_at), MAX(available_at), MAX(id),
       SUM(COUNT(*)) OVER ()
FROM (
  SELECT id, available_at,
         CASE WHEN LOCATE(': ', line) BETWEEN 2 AND 101 THEN LEFT(line, LOCATE(': ', line) - 1)
              ELSE LEFT(line, 100) END AS k
  FROM (
    SELECT id, available_at,
           TRIM(CASE WHEN LOCATE('\n  ', t) > 0
                     THEN SUBSTRING_INDEX(CASE WHEN LOCATE('\n', seg) > 0
                                               THEN SUBSTRING(seg, LOCATE('\n', seg) + 1)
                                               ELSE seg END, '\n', 1)
                     ELSE SUBSTRING_INDEX(t, '\n', -1) END) AS line
    FROM (
      SELECT id, available_at, t, SUBSTRING_INDEX(t, '\n  ', -1) AS seg
      FROM (
        SELECT id, available_at,
               TRIM(TRAILING '\n' FROM TRIM(TRAILING ' ' FROM RIGHT(COALESCE(last_error, ''), 400))) AS t
        FROM `{table}` FORCE INDEX (`{table}_claim`)
        WHERE queue = %s AND status = 'failed'
        ORDER BY priority DESC, available_at, id
        LIMIT %s
      ) AS tails LIMIT 18446744073709551615
    ) AS segments LIMIT 18446744073709551615
  ) AS sample LIMIT 18446744073709551615
) AS keyed
GROUP BY LOWER(k) ORDER BY n DESC, MIN(k) LIMIT %s

-- name: failure_matches
-- How many messages of the same sample hold each key (lowered) anywhere in
-- last_error: what the error filter would select. `{matches}` is one
-- failure_match per key.
SELECT {matches}
FROM (
  SELECT LOWER(COALESCE(last_error, '')) AS error
  FROM `{table}` FORCE INDEX (`{table}_claim`)
  WHERE queue = %s AND status = 'failed'
  ORDER BY priority DESC, available_at, id
  LIMIT %s
) AS sample

-- name: failure_match
SUM(LOCATE(%s, error) > 0)

-- name: search_ids
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM `{table}`
WHERE id IN ({ids}) AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: search_queues
-- Every queue holding a row: a loose scan of the due index ("index for group-by").
SELECT DISTINCT queue FROM `{table}` LIMIT %s

-- name: search_key
-- A unique key in one queue, by the unique index (queue:key).
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM `{table}`
WHERE unique_slot = CONCAT(%s, ':', %s) AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: search_window
-- The rows an error search looks at: the next `%s` ids after one, by the primary key.
SELECT MAX(id), COUNT(*) FROM (SELECT id FROM `{table}` WHERE id > %s ORDER BY id LIMIT %s) w

-- name: search_error
-- Live messages of a window whose last_error holds the text (given lowered).
SELECT id, queue, status, priority, error_count, created_at, available_at, unique_key,
       last_error, owner, heartbeat_at
FROM `{table}`
WHERE id > %s AND id <= %s AND status IN ('ready', 'delayed', 'processing', 'failed')
  AND LOCATE(%s, LOWER(last_error)) > 0
ORDER BY id
LIMIT %s

-- name: lock_ids
-- retry/delete by id: lock the rows first, so what is refused (processing) and
-- what is changed are decided on the same state.
SELECT id, status, owner FROM `{table}`
WHERE id IN ({ids}) AND status IN ('ready', 'delayed', 'processing', 'failed')
FOR UPDATE

-- name: retry_ids
UPDATE `{table}`
SET status = 'ready', error_count = 0, owner = NULL, heartbeat_at = NULL,
    available_at = UTC_TIMESTAMP(6)
WHERE id IN ({ids}) AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: delete_ids
DELETE FROM `{table}` WHERE id IN ({ids}) AND status IN ('ready', 'delayed', 'processing', 'failed')

-- name: last_id
SELECT MAX(id) FROM `{table}` WHERE queue = %s

-- name: last_id_any
-- The table's last id, on its primary key: a confirmation's bound (nothing enqueued
-- after it is acted on) without reading a queue's every row.
SELECT MAX(id) FROM `{table}`

-- name: purge_live
-- A bounded batch of a queue's messages, up to the last id when purge started
-- (so a producer's new messages are not chased).
DELETE FROM `{table}`
WHERE queue = %s AND status IN ('ready', 'delayed', 'processing', 'failed') AND id <= %s LIMIT %s

-- name: purge_status
-- One status, or 'done': the tombstones of unique keys.
DELETE FROM `{table}` WHERE queue = %s AND status IN (%s, %s) AND id <= %s LIMIT %s

-- name: purge_due
-- A bounded batch of a queue's messages that are ready now (`mq list --status
-- ready`), under either stored status; delayed ones stay (ready never includes them).
DELETE FROM `{table}` WHERE queue = %s AND status IN ('ready', 'delayed') AND available_at <= UTC_TIMESTAMP(6) AND id <= %s LIMIT %s

-- name: purge_delayed
-- A bounded batch of a queue's messages not due yet (`mq list --status delayed`):
-- scheduled, or backing off after a failure.
DELETE FROM `{table}` WHERE queue = %s AND status IN ('ready', 'delayed') AND available_at > UTC_TIMESTAMP(6) AND id <= %s LIMIT %s

-- name: owned
-- Which of these messages this drain still holds (after a pause, or a lost reply).
SELECT id FROM `{table}` WHERE id IN ({ids}) AND owner = %s AND status = 'processing'

-- name: release_owner
-- After a claim whose COMMIT reply was lost: whatever that claim took goes back.
UPDATE `{table}` SET status = 'ready', owner = NULL, heartbeat_at = NULL
WHERE queue = %s AND status = 'processing' AND owner = %s

-- name: release_owner_keeping
-- The same while the drain holds others on the queue (a claim made ahead of the
-- batch it runs): those stay its own.
UPDATE `{table}` SET status = 'ready', owner = NULL, heartbeat_at = NULL
WHERE queue = %s AND status = 'processing' AND owner = %s AND id NOT IN ({ids})

-- Schema shape and migrations (backends/schema.py): what `mq init` repairs and
-- what every command checks once before it reads or writes messages.

-- name: init_lock
-- `mq init` holds it while it runs (backends/sqlschema.py): DDL commits as it
-- goes here, so a second init waits for the first (INIT_WAIT seconds a try) instead of
-- racing it. Lock names are server-wide: this one is the database's and the
-- table's, hashed into the 64 characters a name may have.
SELECT GET_LOCK(CONCAT('mq:', LEFT(SHA1(CONCAT(DATABASE(), '.', %s)), 40)), %s)

-- name: init_unlock
SELECT RELEASE_LOCK(CONCAT('mq:', LEFT(SHA1(CONCAT(DATABASE(), '.', %s)), 40)))

-- name: table_columns
SELECT COLUMN_NAME, TABLE_SCHEMA FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s

-- name: table_indexes
SELECT INDEX_NAME, MIN(NON_UNIQUE) = 0 FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s
GROUP BY INDEX_NAME

-- name: set_version
INSERT INTO `{table}_meta` (name, value) VALUES ('schema_version', %s)
ON DUPLICATE KEY UPDATE value = VALUES(value)

-- name: unique_key_type
-- Before schema version 1 the key was utf8mb4 text, whose collation pads and
-- folds: 'k' and 'k ' collided. Version 1 stores bytes.
SELECT DATA_TYPE FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND COLUMN_NAME = 'unique_key'

-- name: migrate_0_unique_key_bytes
ALTER TABLE `{table}` MODIFY unique_key VARBINARY(1020) NULL

-- name: add_column_status
-- Columns a damaged table may have lost, each with a default for its rows. A
-- message's queue, payload or id cannot be made up: those are not here.
ALTER TABLE `{table}` ADD COLUMN
  status VARCHAR(10) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'ready'

-- name: add_column_priority
ALTER TABLE `{table}` ADD COLUMN priority INT NOT NULL DEFAULT 0

-- name: add_column_available_at
ALTER TABLE `{table}` ADD COLUMN available_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00'

-- name: add_column_created_at
ALTER TABLE `{table}` ADD COLUMN created_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00'

-- name: add_column_heartbeat_at
ALTER TABLE `{table}` ADD COLUMN heartbeat_at DATETIME(6) NULL

-- name: add_column_owner
ALTER TABLE `{table}` ADD COLUMN owner VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL

-- name: add_column_error_count
ALTER TABLE `{table}` ADD COLUMN error_count INT NOT NULL DEFAULT 0

-- name: add_column_last_error
ALTER TABLE `{table}` ADD COLUMN last_error TEXT NULL

-- name: add_column_unique_key
ALTER TABLE `{table}` ADD COLUMN unique_key VARBINARY(1020) NULL

-- name: add_claim_index
ALTER TABLE `{table}` ADD KEY `{table}_claim` (queue, status, priority DESC, available_at, id)

-- name: add_column_unique_slot
-- Schema version 2 (and a repair): the unique-key index's column, NULL without a key.
ALTER TABLE `{table}`
  ADD COLUMN unique_slot VARBINARY(1090) AS (CONCAT(queue, ':', unique_key)) STORED

-- name: unique_index_columns
SELECT COLUMN_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s AND INDEX_NAME = %s
ORDER BY SEQ_IN_INDEX

-- name: drop_unique_index
-- Version 1 indexed (queue, unique_key): one Galera certification key per queue.
ALTER TABLE `{table}` DROP INDEX `{table}_unique`

-- name: add_due_index
ALTER TABLE `{table}` ADD KEY `{table}_due` (queue, status, available_at)

-- name: migrate_3_delayed
UPDATE `{table}` SET status = 'delayed' WHERE status = 'ready' AND available_at > UTC_TIMESTAMP(6)

-- name: add_unique_index
ALTER TABLE `{table}` ADD UNIQUE KEY `{table}_unique` (unique_slot)

-- name: probe_write
-- `mq check`: a row no drain could claim (a queue name mq never accepts),
-- inserted inside a transaction that is always rolled back.
INSERT INTO `{table}` (queue, available_at, created_at, payload)
VALUES ('mq check probe', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '')

-- Clock steps (mq_cli/host/clock.py): each drain start, heartbeat and gc records
-- the database's now per host; a jump between two of them that the host's
-- boot clock did not see is a step, and stalled detection waits it out.

-- name: clock_read
SELECT UTC_TIMESTAMP(6),
       (SELECT created_at FROM `{table}` ORDER BY id DESC LIMIT 1),
       (SELECT value FROM `{table}_meta` WHERE name = 'clock_seen'),
       (SELECT value FROM `{table}_meta` WHERE name = 'clock_step'),
       (SELECT value FROM `{table}_meta` WHERE name = %s)

-- name: clock_step
SELECT UTC_TIMESTAMP(6), (SELECT value FROM `{table}_meta` WHERE name = 'clock_step')

-- name: meta_put
INSERT INTO `{table}_meta` (name, value) VALUES (%s, %s)
ON DUPLICATE KEY UPDATE value = VALUES(value)

-- name: clock_repair_back
-- After the clock went back: a ready message created "in the future" was
-- stored before the step. Move its times back so that it is as old as it was
-- at least (created now, its delay kept), instead of hidden for the step's size.
UPDATE `{table}`
SET available_at = TIMESTAMPADD(MICROSECOND,
        -TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), created_at), available_at),
    created_at = UTC_TIMESTAMP(6)
WHERE status IN ('ready', 'delayed') AND created_at > UTC_TIMESTAMP(6)

-- name: meta_notes
-- What a drain reads as it starts. Paused queues (`mq pause`): 'paused:QUEUE',
-- or 'paused#HASH' for a long name, the value "since|QUEUE"; queues no drain
-- could start (mq_cli/drain/startfail.py): 'nostart:QUEUE' or 'nostart#HASH', the
-- value "since|QUEUE|error".
SELECT name, value FROM `{table}_meta` WHERE LEFT(name, 7) IN ('paused:', 'paused#', 'nostart')

-- name: meta_delete
DELETE FROM `{table}_meta` WHERE name = %s

-- name: live_take
-- The drain's lock (mq_cli/backends/liveness.py): it dies with this session.
SELECT GET_LOCK(%s, 0)

-- name: live_free
SELECT IS_FREE_LOCK(%s)

-- name: live_release
SELECT RELEASE_LOCK(%s)

-- name: probe
SELECT 1

-- name: processing_owners
SELECT DISTINCT owner FROM `{table}` WHERE queue = %s AND status = 'processing' LIMIT 1000

-- name: mark_dead
-- Its drain's lock is free (and held by the caller meanwhile): stalled now.
UPDATE `{table}` SET heartbeat_at = '1970-01-01 00:00:00'
WHERE queue = %s AND status = 'processing' AND owner = %s

-- name: owner_counts
-- Per owner: processing messages, and of them those with an old heartbeat.
SELECT owner, COUNT(*),
       SUM(heartbeat_at < TIMESTAMPADD(MICROSECOND, %s, UTC_TIMESTAMP(6)))
FROM `{table}` WHERE queue = %s AND status = 'processing'
GROUP BY owner

-- The run log (mq_cli/drain/runlog.py): one row per drain run, one per run, queue
-- and time slice of its results. Its times are Unix seconds of the database's
-- clock (DOUBLE), as the drain measured them; wait and duration histograms are
-- text (mq_cli/host/runlog.Histogram).

-- name: create_runs
CREATE TABLE IF NOT EXISTS `{table}_runs` (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  owner VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  host VARCHAR(255) NOT NULL,
  pid INT NOT NULL,
  queues TEXT NOT NULL,
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
  started_at DOUBLE NOT NULL,
  seen_at DOUBLE NOT NULL,
  ended_at DOUBLE,
  claimed INT NOT NULL DEFAULT 0,
  succeeded INT NOT NULL DEFAULT 0,
  failed INT NOT NULL DEFAULT 0,
  returned INT NOT NULL DEFAULT 0,
  exit_code INT,
  running_id BIGINT UNSIGNED,
  running_since DOUBLE,
  stop_request VARCHAR(16),
  stop_by VARCHAR(300),
  stop_at DOUBLE,
  end_reason VARCHAR(32),
  KEY seen_at (seen_at)
) ENGINE=InnoDB

-- name: create_rollup
CREATE TABLE IF NOT EXISTS `{table}_rollup` (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  run_id BIGINT UNSIGNED,
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  slice_start DOUBLE NOT NULL,
  slice_end DOUBLE NOT NULL,
  done INT NOT NULL DEFAULT 0,
  failed INT NOT NULL DEFAULT 0,
  backlog INT,
  wait_sum DOUBLE NOT NULL DEFAULT 0,
  duration_sum DOUBLE NOT NULL DEFAULT 0,
  wait_hist VARCHAR(2000) CHARACTER SET ascii NOT NULL DEFAULT '',
  duration_hist VARCHAR(2000) CHARACTER SET ascii NOT NULL DEFAULT '',
  KEY slice_end (slice_end)
) ENGINE=InnoDB

-- name: runs_insert
INSERT INTO `{table}_runs` (owner, host, pid, queues, queue, started_at, seen_at)
VALUES (%s, %s, %s, %s, %s, %s, %s)

-- name: runs_update
UPDATE `{table}_runs`
SET seen_at = %s, ended_at = %s, exit_code = %s, queue = %s, claimed = %s, succeeded = %s,
    failed = %s, returned = %s, running_id = %s, running_since = %s,
    end_reason = %s
WHERE id = %s

-- name: rollup_insert
INSERT INTO `{table}_rollup` (run_id, queue, slice_start, slice_end, done, failed, backlog,
                              wait_sum, duration_sum, wait_hist, duration_hist)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)

-- name: runs_purge
DELETE FROM `{table}_runs` WHERE seen_at < %s LIMIT 1000

-- name: rollup_purge
DELETE FROM `{table}_rollup` WHERE slice_end < %s LIMIT 1000

-- name: runs_probe
-- Whether this user may read the table (`mq check`, `mq status`, `mq stats
-- --prometheus`): it reads no row.
SELECT id FROM `{table}_runs` WHERE 1 = 0

-- name: rollup_probe
SELECT id FROM `{table}_rollup` WHERE 1 = 0

-- name: runs_live
SELECT id, owner, host, pid, queues, queue, started_at, seen_at, ended_at, claimed, succeeded,
       failed, returned, exit_code, running_id, running_since, stop_request, stop_by,
       stop_at, end_reason
FROM `{table}_runs` WHERE ended_at IS NULL AND seen_at >= %s ORDER BY started_at, id

-- name: runs_recent
SELECT id, owner, host, pid, queues, queue, started_at, seen_at, ended_at, claimed, succeeded,
       failed, returned, exit_code, running_id, running_since, stop_request, stop_by,
       stop_at, end_reason
FROM `{table}_runs` ORDER BY id DESC LIMIT %s

-- name: runs_request
-- A drain's look for an operator's request (`mq stop`): one row by its key, every
-- couple of seconds at most (drain/requests.py).
SELECT stop_request, stop_by FROM `{table}_runs` WHERE id = %s

-- name: runs_ask_stop
-- `mq stop`: only a run not ended yet; a stop is never turned back into a quiet.
UPDATE `{table}_runs` SET stop_request = %s, stop_by = %s, stop_at = %s
WHERE id = %s AND ended_at IS NULL
  AND (%s = 'stop' OR stop_request IS NULL OR stop_request <> 'stop')

-- The run log's columns added by schema version 5 (an operator's stop request, why a
-- run ended), each on its own: SQLite adds one column per statement.
-- name: runs_add_stop_request
ALTER TABLE `{table}_runs` ADD COLUMN stop_request VARCHAR(16)

-- name: runs_add_stop_by
ALTER TABLE `{table}_runs` ADD COLUMN stop_by VARCHAR(300)

-- name: runs_add_stop_at
ALTER TABLE `{table}_runs` ADD COLUMN stop_at DOUBLE

-- name: runs_add_end_reason
ALTER TABLE `{table}_runs` ADD COLUMN end_reason VARCHAR(32)

-- name: rollup_since
SELECT queue, slice_start, slice_end, done, failed, wait_sum, duration_sum, wait_hist,
       duration_hist
FROM `{table}_rollup` WHERE slice_end >= %s AND backlog IS NULL

-- name: rollup_totals
SELECT queue, SUM(done), SUM(failed) FROM `{table}_rollup` GROUP BY queue ORDER BY queue

-- name: rollup_series
-- Per queue and step of %s seconds: done, failed, the largest backlog sampled.
SELECT queue, FLOOR(slice_end / %s) AS step, SUM(done), SUM(failed), MAX(backlog)
FROM `{table}_rollup` WHERE slice_end >= %s
GROUP BY queue, step ORDER BY queue, step

-- name: held_by_owner
SELECT owner, COUNT(*) FROM `{table}` WHERE queue = %s AND status = 'processing' GROUP BY owner

-- Fleet limits (mq_cli/host/fleet.py, mq_cli/drain/ratelimit.py). Times in these two
-- tables are Unix seconds of the server's clock, as DOUBLE.

-- name: create_slots
-- max_drains where no session lock is shared by the fleet (Galera): one row per
-- slot, held by its owner while its heartbeat is fresh.
CREATE TABLE IF NOT EXISTS `{table}_slots` (
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  slot INT NOT NULL,
  owner VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NULL,
  heartbeat_at DOUBLE NOT NULL DEFAULT 0,
  PRIMARY KEY (queue, slot)
) ENGINE=InnoDB

-- name: create_rates
-- rate_limit: one token bucket per queue.
CREATE TABLE IF NOT EXISTS `{table}_rates` (
  queue VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
  per_second DOUBLE NOT NULL,
  tokens DOUBLE NOT NULL,
  updated_at DOUBLE NOT NULL,
  granted INT NOT NULL DEFAULT 0,
  throttled DOUBLE NOT NULL DEFAULT 0
) ENGINE=InnoDB

-- name: slot_seed
INSERT IGNORE INTO `{table}_slots` (queue, slot, owner, heartbeat_at) VALUES (%s, %s, NULL, 0)

-- name: slot_take
-- Free, or its holder's heartbeat older than the bound (%s seconds): ours.
UPDATE `{table}_slots`
SET owner = %s, heartbeat_at = TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) / 1e6
WHERE queue = %s AND slot = %s AND (owner IS NULL OR heartbeat_at
  < TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) / 1e6 - %s)

-- name: slot_keep
UPDATE `{table}_slots`
SET heartbeat_at = TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) / 1e6
WHERE queue = %s AND slot = %s AND owner = %s

-- name: slot_release
UPDATE `{table}_slots` SET owner = NULL, heartbeat_at = 0
WHERE queue = %s AND slot = %s AND owner = %s

-- name: slots_in_use
SELECT COUNT(*) FROM `{table}_slots`
WHERE queue = %s AND slot < %s AND owner IS NOT NULL
  AND heartbeat_at >= TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) / 1e6 - %s

-- name: rate_take
-- Refill by the time elapsed (at most `cap` tokens), grant up to `want` whole
-- tokens. MySQL assigns left to right: `tokens` below sees the new `granted`
-- and the old `updated_at`. The caller reads the row back (rate_read) in the
-- same transaction, which holds its lock.
INSERT INTO `{table}_rates` (queue, per_second, tokens, updated_at, granted, throttled)
VALUES (%(queue)s, %(rate)s, %(tokens0)s,
        TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) / 1e6, %(grant0)s, %(slept)s)
ON DUPLICATE KEY UPDATE
  granted = LEAST(%(want)s, FLOOR(LEAST(%(cap)s,
    tokens + VALUES(per_second) * GREATEST(0, VALUES(updated_at) - updated_at)))),
  tokens = LEAST(%(cap)s,
    tokens + VALUES(per_second) * GREATEST(0, VALUES(updated_at) - updated_at)) - granted,
  updated_at = GREATEST(updated_at, VALUES(updated_at)),
  per_second = VALUES(per_second),
  throttled = throttled + VALUES(throttled)

-- name: rate_read
SELECT granted, tokens FROM `{table}_rates` WHERE queue = %s

-- name: rate_refund
UPDATE `{table}_rates` SET tokens = tokens + %s WHERE queue = %s

-- name: rate_state
-- mq status: the rate the drains use, the tokens now (refilled), seconds throttled.
SELECT per_second, LEAST(GREATEST(per_second, 1), tokens + per_second * GREATEST(0,
         TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) / 1e6 - updated_at)),
       throttled
FROM `{table}_rates` WHERE queue = %s

-- name: ready_exists
-- Ready messages, or due delayed ones not promoted yet (each through its index).
SELECT 1 FROM `{table}` WHERE queue = %s AND status = 'ready' AND available_at <= UTC_TIMESTAMP(6)
UNION ALL
SELECT 1 FROM `{table}` WHERE queue = %s AND status = 'delayed' AND available_at <= UTC_TIMESTAMP(6)
LIMIT 1

-- name: table_space
-- `mq check` (backends/bloat.py): InnoDB's free space in the table's file, against
-- what rows and indexes use. DATA_FREE is read live; the lengths are as of the last
-- statistics, and MySQL 8 caches all three for information_schema_stats_expiry.
SELECT data_length + index_length, data_free
FROM information_schema.TABLES
WHERE table_schema = DATABASE() AND table_name = %s

-- name: table_statistics
-- `mq check`: rows changed since InnoDB last took the table's statistics, the rows
-- counted then and how long ago (NULL: never stored). MariaDB's view (needs the
-- PROCESS privilege); its NAME is database/table as the file system spells them.
SELECT s.MODIFIED_COUNTER, s.NUM_ROWS,
       TIMESTAMPDIFF(SECOND, p.last_update, NOW())
FROM information_schema.INNODB_SYS_TABLESTATS s
LEFT JOIN mysql.innodb_table_stats p
  ON p.database_name = DATABASE() AND p.table_name = %s
WHERE s.NAME = CONCAT(DATABASE(), '/', %s)

-- name: ids_present
-- After an enqueue's COMMIT whose answer was lost: how many of its rows are there.
SELECT COUNT(*) FROM `{table}` WHERE id IN ({ids})
