def test_enqueue_then_stats(db):
    result = db.run("enqueue", "-q", "demo", '{"hello": 1}')
    assert result.exit_code == 0, result.output
    new_id = int(result.stdout.strip())
    assert db.sql("SELECT COUNT(*) FROM mq_messages WHERE id = %s", (new_id,)) == [(1,)]
    result = db.run("stats", "--json")
    assert '"demo": {"ready": 1' in result.stdout
