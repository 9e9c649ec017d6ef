"""What tests/test_search_path.py needs: the statements mq sends to PostgreSQL, the
functions, casts and operators in them, and a database's `public` schema filled with
look-alikes that record every call in ``public.captured``.

The look-alikes, built from what the statements use (a function or operator mq
starts using is covered without a change here):

- for each function and aggregate called: a copy of every pg_catalog overload of
  that name (identical argument types: it wins wherever public is searched before
  pg_catalog), and for each argument of each overload a variant with another
  built-in type there (``make_interval(..., secs numeric)``): a better match than
  pg_catalog's for an argument of that type, which wins even with pg_catalog first
  unless the call names pg_catalog;
- for each operator used: one for every pair of these types that pg_catalog has no
  operator for exactly but resolves by converting an operand (``numeric -
  double precision``): such an operator elsewhere wins over the conversion;
- domains ``public.text``, ``public.bytea``, ``public.timestamptz`` and a collation
  ``public."C"``: what an unqualified type or collation finds when public comes first.

Each records its call in ``public.captured``, then does what the built-in would
(``OPERATOR(pg_catalog.=)`` for an operator), so that the statement goes on and its
transaction commits the record.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mq_cli.backends
from mq_cli.backends.sqlfiles import load_queries

BACKENDS = Path(mq_cli.backends.__file__).parent
#: the PostgreSQL dialect's modules, whose Python may hold SQL text of its own
PY_FILES = sorted((BACKENDS / "postgres").glob("*.py"))
_STATEMENT = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH) ")

#: words followed by "(" that are syntax, not a call
SYNTAX = frozenset({
    "all", "and", "any", "as", "by", "cast", "coalesce", "conflict", "exists", "extract",
    "filter", "from", "greatest", "in", "join", "key", "least", "materialized", "not",
    "nullif", "on", "or", "over", "row", "select", "set", "using", "values", "where", "with",
})  # fmt: skip
#: type names the grammar itself maps to pg_catalog's types
KEYWORD_TYPES = frozenset({"bigint", "int", "integer", "smallint", "double", "boolean", "real"})

#: types of the look-alike variants and operators: every built-in type mq's columns,
#: literals and bound values have, and their near neighbours
TYPES = (
    "smallint", "integer", "bigint", "numeric", "real", "double precision", "text", "name",
    "character varying", '"char"', "boolean", "bytea", "timestamp with time zone",
    "timestamp without time zone", "interval", "oid", "regclass", "regnamespace", "xid",
)  # fmt: skip
#: types a PL/pgSQL function cannot take (skipped)
PSEUDO = frozenset({
    "internal", "cstring", '"any"', "any", "record", "trigger", "event_trigger", "opaque",
    "language_handler", "fdw_handler", "index_am_handler", "tsm_handler", "table_am_handler",
})  # fmt: skip


def statements() -> dict[str, str]:
    """{name: SQL} of everything mq sends to PostgreSQL: postgres/postgres.sql's blocks, and
    statement text written in the dialect's Python (not f-strings: those are messages)."""
    found = dict(load_queries("postgres"))
    for path in PY_FILES:
        tree = ast.parse(path.read_text())
        inside_f = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in inside_f
                and _STATEMENT.match(node.value)
            ):
                found[f"postgres/{path.name}:{node.lineno}"] = node.value
    return found


def _code(sql: str) -> str:
    """``sql`` without its string literals (their text is no code)."""
    return re.sub(r"'(?:[^']|'')*'", "''", sql)


def calls(sql: str) -> Iterator[tuple[str, bool]]:
    """(function name, called as pg_catalog.name) for each call in ``sql``."""
    pattern = r'(\bAS\s+)?(pg_catalog\s*\.\s*)?(\w+|"\w+")\s*\('
    for alias, schema, name in re.findall(pattern, _code(sql), re.IGNORECASE):
        if alias or (not schema and name.lower() in SYNTAX):
            continue  # `AS b (columns)`, or syntax
        yield name.strip('"').lower(), bool(schema)


def casts(sql: str) -> Iterator[tuple[str, bool]]:
    """(type name, pinned to pg_catalog) for each ``::type`` in ``sql``."""
    for schema, name in re.findall(r'::\s*(pg_catalog\s*\.\s*)?(\w+|"\w+")', _code(sql)):
        yield name.strip('"').lower(), bool(schema) or name.lower() in KEYWORD_TYPES


def operators(sql: str) -> set[str]:
    """The operators written in ``sql`` (IN, BETWEEN... use them too: = <= >=)."""
    code = re.sub(r"%\(\w+\)s|%s|::|=>|\(\*\)", " ", _code(sql))
    return set(re.findall(r"[-+*/<>=!~|]+", code)) | {"="}


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_PROCS = """
SELECT p.proname, p.prokind, p.proretset, p.provariadic <> 0 OR p.proargmodes IS NOT NULL,
       pg_catalog.format_type(p.prorettype, NULL),
       ARRAY(SELECT pg_catalog.format_type(u.t, NULL)
             FROM pg_catalog.unnest(p.proargtypes::pg_catalog.oid[]) WITH ORDINALITY AS u(t, n)
             ORDER BY u.n),
       COALESCE(p.proargnames, '{}'),
       ARRAY(SELECT pg_catalog.pg_get_function_arg_default(p.oid, i)
             FROM pg_catalog.generate_series(1, p.pronargs) AS i ORDER BY i),
       (SELECT f.proname FROM pg_catalog.pg_proc f WHERE f.oid = a.aggtransfn),
       pg_catalog.format_type(a.aggtranstype, NULL), a.agginitval,
       (SELECT f.proname FROM pg_catalog.pg_proc f WHERE f.oid = a.aggfinalfn),
       COALESCE(a.aggfinalextra, false)
FROM pg_catalog.pg_proc p
LEFT JOIN pg_catalog.pg_aggregate a ON a.aggfnoid = p.oid
WHERE p.pronamespace = 'pg_catalog'::pg_catalog.regnamespace::pg_catalog.oid
  AND p.proname = ANY (%s::pg_catalog.name[])
"""


class _Functions:
    """The look-alikes' DDL, without two of one signature."""

    def __init__(self) -> None:
        self.ddl: list[str] = []
        self._made: set[tuple[str, tuple[str, ...]]] = set()

    def function(self, name: str, args: list[str], names: list[str], defaults: list[Any],
                 result: str, setof: bool, call: list[str]) -> None:  # fmt: skip
        if (name, tuple(args)) in self._made:
            return
        self._made.add((name, tuple(args)))
        declared = ", ".join(
            f"{f'{chr(34)}{n}{chr(34)} ' if n else ''}{t}{f' DEFAULT {d}' if d is not None else ''}"
            for t, n, d in zip(args, names, defaults, strict=True)
        )
        what = _literal(f"{name}({', '.join(args)})")
        builtin = f'pg_catalog."{name}"({", ".join(call)})'
        if setof:
            body = f"RETURN QUERY SELECT * FROM {builtin};"  # noqa: S608 - built, not bound
        elif result == "void":
            body = f"PERFORM {builtin};"
        else:
            body = f"RETURN {builtin};"
        self.ddl.append(
            f'CREATE FUNCTION public."{name}"({declared}) '  # noqa: S608
            f"RETURNS {'SETOF ' if setof else ''}{result} LANGUAGE plpgsql AS "
            f"$$ BEGIN INSERT INTO public.captured VALUES ({what}); {body} END $$"
        )

    def aggregate(self, name: str, args: list[str], result: str, row: tuple) -> None:
        transfn, transtype, initval, finalfn, extra = row
        if extra or transtype in PSEUDO or (name, tuple(args)) in self._made:
            return
        self._made.add((name, tuple(args)))
        final = f"public.mq_cap_final_{len(self._made)}"
        what = _literal(f"{name}({', '.join(args) or '*'})")
        value = f'pg_catalog."{finalfn}"(state)' if finalfn else "state"
        self.ddl.append(
            f"CREATE FUNCTION {final}(state {transtype}) RETURNS {result} LANGUAGE plpgsql "  # noqa: S608
            f"AS $$ BEGIN INSERT INTO public.captured VALUES ({what}); RETURN {value}; END $$"
        )
        init = f", INITCOND = {_literal(initval)}" if initval is not None else ""
        self.ddl.append(
            f'CREATE AGGREGATE public."{name}"({", ".join(args) or "*"}) '
            f'(SFUNC = pg_catalog."{transfn}", STYPE = {transtype}, FINALFUNC = {final}{init})'
        )


def _polymorphic(kind: str) -> bool:
    return kind.startswith("any")


def function_lookalikes(conn: Any, names: set[str]) -> list[str]:
    """DDL of the look-alikes of every pg_catalog function and aggregate in ``names``."""
    made = _Functions()
    for row in conn.execute(_PROCS, (sorted(names),)).fetchall():
        name, kind, setof, odd, result, args, argnames, defaults = row[:8]
        if odd or result in PSEUDO or any(a in PSEUDO for a in args):
            continue  # variadic, OUT arguments, or types PL/pgSQL cannot take
        if kind == "a":
            if not any(map(_polymorphic, [*args, result])):
                made.aggregate(name, list(args), result, row[8:])
            continue
        names_ = list(argnames) + [""] * (len(args) - len(argnames))
        positions = [f"${i}" for i in range(1, len(args) + 1)]
        made.function(name, list(args), names_, list(defaults), result, setof, positions)
        if any(map(_polymorphic, [*args, result])):
            continue
        for i, original in enumerate(args):
            for other in TYPES:
                if other != original:
                    variant = [*args[:i], other, *args[i + 1 :]]
                    call = [*positions[:i], f"{positions[i]}::{original}", *positions[i + 1 :]]
                    # Its default (a value of the original type) would not fit: NULL does.
                    fits = [
                        *defaults[:i],
                        None if defaults[i] is None else "NULL",
                        *defaults[i + 1 :],
                    ]
                    made.function(name, variant, names_, fits, result, setof, call)
    return made.ddl


def operator_lookalikes(ops: set[str]) -> str:
    """One DO block: for each of ``ops`` and each pair of TYPES that pg_catalog has no
    exact operator for but resolves by a conversion, an operator in public."""
    types = ", ".join(_literal(t) for t in TYPES)
    names = ", ".join(_literal(o) for o in sorted(ops))
    return _OPERATORS.replace("@OPERATORS@", names).replace("@TYPES@", types)


_OPERATORS = """
DO $do$
DECLARE
  op pg_catalog.text; l pg_catalog.text; r pg_catalog.text; res pg_catalog.text;
  found pg_catalog.text[] := '{}'; n pg_catalog.int4 := 0;
BEGIN
  FOREACH op IN ARRAY ARRAY[@OPERATORS@]::pg_catalog.text[] LOOP
    FOREACH l IN ARRAY ARRAY[@TYPES@]::pg_catalog.text[] LOOP
      FOREACH r IN ARRAY ARRAY[@TYPES@]::pg_catalog.text[] LOOP
        CONTINUE WHEN EXISTS (
          SELECT 1 FROM pg_catalog.pg_operator o
          WHERE o.oprname = op::pg_catalog.name
            AND o.oprleft = l::pg_catalog.regtype::pg_catalog.oid
            AND o.oprright = r::pg_catalog.regtype::pg_catalog.oid);
        BEGIN
          EXECUTE pg_catalog.format(
            'SELECT pg_catalog.format_type(pg_catalog.pg_typeof(NULL::%s %s NULL::%s), NULL)',
            l, op, r) INTO res;
        EXCEPTION WHEN OTHERS THEN
          CONTINUE;  -- no operator at all for these types: no statement can use one
        END;
        found := found || ARRAY[op, l, r, res];
      END LOOP;
    END LOOP;
  END LOOP;
  FOR i IN 1 .. COALESCE(pg_catalog.array_length(found, 1), 0) BY 4 LOOP
    n := n + 1;
    EXECUTE pg_catalog.format(
      'CREATE FUNCTION public.mq_cap_op_%s(%s, %s) RETURNS %s LANGUAGE plpgsql AS '
      '$b$ BEGIN INSERT INTO public.captured VALUES (%L); '
      'RETURN $1 OPERATOR(pg_catalog.%s) $2; END $b$',
      n, found[i + 1], found[i + 2], found[i + 3],
      pg_catalog.format('%s %s %s', found[i + 1], found[i], found[i + 2]), found[i]);
    EXECUTE pg_catalog.format(
      'CREATE OPERATOR public.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = public.mq_cap_op_%s)',
      found[i], found[i + 1], found[i + 2], n);
  END LOOP;
END
$do$
"""


TYPE_LOOKALIKES = """
CREATE FUNCTION public.mq_cap_type(what pg_catalog.text) RETURNS pg_catalog.bool
  LANGUAGE plpgsql AS $$ BEGIN INSERT INTO public.captured VALUES (what); RETURN true; END $$;
CREATE DOMAIN public.text AS pg_catalog.text CHECK (public.mq_cap_type('type text'));
CREATE DOMAIN public.bytea AS pg_catalog.bytea CHECK (public.mq_cap_type('type bytea'));
CREATE DOMAIN public.timestamptz AS pg_catalog.timestamptz
  CHECK (public.mq_cap_type('type timestamptz'));
CREATE COLLATION public."C" (provider = libc, locale = 'C');
"""


def install(conn: Any) -> int:
    """Fill ``public`` with the look-alikes of what mq's statements use; how many."""
    sql = statements()
    functions = {name for text in sql.values() for name, _ in calls(text)}
    ops = set().union(*(operators(text) for text in sql.values()))
    conn.execute("CREATE TABLE public.captured (what pg_catalog.text NOT NULL)")
    ddl = function_lookalikes(conn, functions)
    conn.execute(";\n".join(ddl))
    conn.execute(operator_lookalikes(ops))
    conn.execute(TYPE_LOOKALIKES)
    conn.execute("TRUNCATE public.captured")
    (count,) = conn.execute(
        "SELECT pg_catalog.count(*) FROM pg_catalog.pg_proc "
        "WHERE pronamespace = 'public'::pg_catalog.regnamespace::pg_catalog.oid"
    ).fetchone()
    return int(count)
