"""Multi-host PostgreSQL URLs (libpq's ``h1:5432,h2:5433`` with target_session_attrs):
parsed, shown with every host and no password, and accepted wherever a URL is."""

from __future__ import annotations

import pytest

import mq_cli
from mq_cli.core.dburl import parse_database_url
from mq_cli.core.errors import ConfigError
from tests.servers import free_ports

URL = "postgresql://mq:s3cret@db1:5432,db2:5433,[2001:db8::7]/app?target_session_attrs=read-write"


def test_every_host_is_kept_in_order_with_its_port():
    s = parse_database_url(URL)
    assert s.hosts == (("db1", 5432), ("db2", 5433), ("2001:db8::7", 5432))
    assert (s.host, s.port, s.user, s.password, s.database) == ("db1", 5432, "mq", "s3cret", "app")
    assert s.target_session_attrs == "read-write"


def test_describe_shows_every_host_and_never_the_password():
    s = parse_database_url(URL)
    assert s.describe() == (
        "postgresql://mq@db1:5432,db2:5433,[2001:db8::7]:5432/app?target_session_attrs=read-write"
    )
    assert "s3cret" not in s.describe() and "s3cret" not in repr(s)


def test_one_host_stays_as_it_was():
    s = parse_database_url("postgresql://mq:pw@db1:5433/app")
    assert (s.hosts, s.host, s.port, s.target_session_attrs) == ((), "db1", 5433, None)
    assert s.describe() == "postgresql://mq@db1:5433/app"


@pytest.mark.parametrize(
    "url, words",
    [
        ("postgresql://mq:s3cret@db1:x,db2/app", "'db1:x' is not host or host:port"),
        ("postgresql://mq:s3cret@db1,,db2/app", "is not host or host:port"),
        ("postgresql://mq:s3cret@db1:70000,db2/app", "'db1:70000' is not host"),
        ("postgresql://mq:s3cret@db1,db2/app?target_session_attrs=rw", "target_session_attrs is"),
        ("postgresql://mq:s3cret@db1,db2/app?host=/run/pg", "not both"),
        ("mysql://mq:s3cret@db1/app?target_session_attrs=read-write", "for PostgreSQL only"),
    ],
)
def test_bad_host_lists_say_what_is_wrong_without_the_password(url, words):
    with pytest.raises(ConfigError) as caught:
        parse_database_url(url)
    assert words in str(caught.value)
    assert "s3cret" not in str(caught.value)


def _dead_then(db_url: str) -> str:
    """The test database's URL with a host before it where nothing listens."""
    (dead,) = free_ports(1)
    scheme, rest = db_url.split("://", 1)
    who, _, where = rest.rpartition("@")
    return f"{scheme}://{who}@127.0.0.1:{dead},{where}"


def test_libpq_tries_the_hosts_in_order_everywhere_a_url_goes(pg_db, tmp_path):
    url = _dead_then(pg_db.url) + "?target_session_attrs=read-write"
    result = pg_db.run("-d", url, "init")
    assert result.exit_code == 0, result.output
    result = pg_db.run("enqueue", "-q", "q", "1", env={"MQ_DATABASE_URL": url})
    assert result.exit_code == 0, result.output
    config = tmp_path / "mq.yaml"
    config.write_text(f"database:\n  url: '{url}'\n")
    result = pg_db.run("-c", str(config), "stats", "--json", env={"MQ_DATABASE_URL": None})
    assert result.exit_code == 0, result.output
    assert '"ready": 1' in result.stdout
    with mq_cli.connect(database=url) as mq:
        mq.enqueue("q", 2)
    result = pg_db.run("-c", str(config), "check", env={"MQ_DATABASE_URL": None})
    assert "reachable: postgresql://postgres@127.0.0.1:" in result.stdout
    assert (
        ",127.0.0.1:5432/" in result.stdout and "target_session_attrs=read-write" in result.stdout
    )
    assert pg_db.sql("SELECT COUNT(*) FROM mq_messages") == [(2,)]


def test_no_host_answering_is_exit_3_naming_every_host(pg_db):
    first, second = free_ports(2)
    url = f"postgresql://postgres:s3cret@127.0.0.1:{first},127.0.0.1:{second}/app"
    result = pg_db.run("-d", url, "stats")
    assert result.exit_code == 3
    assert f"127.0.0.1:{first},127.0.0.1:{second}" in result.stderr
    assert "s3cret" not in result.output and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) <= 2
