"""MariaDB's unique-key index: one that Galera can certify without making every
write of a queue conflict (see the comment in mysql/mysql.sql), and `mq init`
bringing a table of the earlier shape to it."""

from __future__ import annotations

OLD_TABLE = """
CREATE TABLE mq_messages (
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
  unique_key VARBINARY(1020) NULL,
  payload LONGBLOB NOT NULL,
  PRIMARY KEY (id),
  KEY mq_messages_claim (queue, status, priority DESC, available_at, id),
  UNIQUE KEY mq_messages_unique (queue, unique_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""


def unique_columns(db) -> list[str]:
    rows = db.sql(
        "SELECT column_name FROM information_schema.statistics WHERE table_schema = DATABASE() "
        "AND table_name = 'mq_messages' AND index_name = 'mq_messages_unique' ORDER BY seq_in_index"
    )
    return [row[0] for row in rows]


def test_the_unique_index_leaves_messages_without_a_key_out(mysql_db):
    assert mysql_db.run("init").exit_code == 0
    # A NULL in any part would be certified by Galera as one key per queue.
    assert unique_columns(mysql_db) == ["unique_slot"]
    mysql_db.run("enqueue", "-q", "q", "--unique-key", "k", '"a"')
    mysql_db.run("enqueue", "-q", "q", '"b"')
    assert mysql_db.sql("SELECT unique_slot FROM mq_messages ORDER BY id") == [(b"q:k",), (None,)]


def test_init_moves_an_earlier_table_to_the_new_index(mysql_db):
    mysql_db.sql(OLD_TABLE)
    mysql_db.sql(
        "INSERT INTO mq_messages (queue, available_at, created_at, unique_key, payload) "
        "VALUES ('q', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), 'k', '1')"
    )
    result = mysql_db.run("init")
    assert result.exit_code == 0, result.output
    assert unique_columns(mysql_db) == ["unique_slot"]
    again = mysql_db.run("enqueue", "-q", "q", "--unique-key", "k", '"2"')
    assert again.exit_code == 0, again.output
    assert mysql_db.sql("SELECT COUNT(*) FROM mq_messages") == [(1,)]
    other = mysql_db.run("enqueue", "-q", "other", "--unique-key", "k", '"3"')
    assert other.exit_code == 0 and other.stdout.strip().isdigit(), other.output
    assert mysql_db.run("init").exit_code == 0  # idempotent


def test_a_reused_key_is_found_through_the_index(mysql_db):
    assert mysql_db.run("init").exit_code == 0
    plan = mysql_db.sql(
        "EXPLAIN DELETE FROM mq_messages WHERE unique_slot = CONCAT('q', ':', 'k') "
        "AND status = 'done' AND available_at <= UTC_TIMESTAMP(6)"
    )
    assert "mq_messages_unique" in str(plan), plan


def test_init_from_version_1_says_what_it_changed(mysql_db):
    mysql_db.sql(OLD_TABLE)
    mysql_db.sql("CREATE TABLE mq_messages_meta (name VARCHAR(64) PRIMARY KEY, value TEXT)")
    mysql_db.sql("INSERT INTO mq_messages_meta VALUES ('schema_version', '1')")
    refused = mysql_db.run("enqueue", "-q", "q", '"x"')
    assert refused.exit_code == 3 and "run `mq init` to migrate" in refused.stderr
    result = mysql_db.run("init")
    assert result.exit_code == 0, result.output
    assert "migrated 1 -> 2: added column unique_slot" in result.stdout
    assert "dropped index mq_messages_unique over (queue, unique_key)" in result.stdout
    assert "restored index mq_messages_unique" in result.stdout
    assert unique_columns(mysql_db) == ["unique_slot"]
