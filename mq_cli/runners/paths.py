"""Finding a queue's handler from its path, and checking the path without running it.

Handler paths (the ``handler:`` of a queue, or ``mq drain --handler``):

- ``package.module:function`` -- called with the decoded payload;
- ``package.module:Class.method`` -- a static or class method is called as it
  is; for a plain method the class is built once with no arguments;
- ``package.module:Class`` -- built once with no arguments; the instance is called;
- ``exec:COMMAND ARGS...`` -- a program run without a shell, the raw payload
  on its stdin (see :mod:`mq_cli.runners.programs`).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable

from mq_cli.core.errors import HandlerNotFound

# inspect, shlex and shutil are imported where they are needed: the handler's
# child imports this module at every start, and inspect alone is ~8 ms of it.

EXEC_PREFIX = "exec:"

_DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")


def is_exec(path: str) -> bool:
    return path.startswith(EXEC_PREFIX)


def _split_path(path: str) -> tuple[str, list[str]]:
    module, sep, attr = path.partition(":")
    if not sep or not _DOTTED.match(module) or not _DOTTED.match(attr):
        raise HandlerNotFound(
            f"handler {path!r} is not a handler path; write 'package.module:function', "
            "'package.module:Class', 'package.module:Class.method' or 'exec:COMMAND ARGS...'"
        )
    return module, attr.split(".")


def _cwd_importable() -> None:
    # `mq` runs as a console script, so sys.path[0] is the venv's bin directory,
    # not where cron or the operator started it. Handlers there must import, but
    # last: a directory others can write must not shadow the standard library or
    # mq itself (the worker puts it last too, so `mq check` and the drain agree).
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def _import(module_name: str, path: str) -> object:
    _cwd_importable()
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise HandlerNotFound(
                f"handler {path!r}: no module named {missing!r}; check the spelling, "
                "the directory mq runs in, and the virtualenv"
            ) from None
        raise HandlerNotFound(
            f"handler {path!r}: importing {module_name} failed: {exc}; install what it imports"
        ) from exc
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a module may raise anything at import, even SystemExit
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise HandlerNotFound(
            f"handler {path!r}: importing {module_name} failed{where}: "
            f"{type(exc).__name__}: {exc}; fix the module"
        ) from exc


def _locate(path: str) -> tuple[object, object | None, bool]:
    """(target, its owner, whether target is a plain method needing an instance of owner)."""
    module_name, parts = _split_path(path)
    target: object = _import(module_name, path)
    owner: object | None = None
    for index, part in enumerate(parts):
        owner = target
        try:
            target = getattr(target, part)
        except AttributeError:
            where = ".".join([module_name, *parts[:index]])
            raise HandlerNotFound(
                f"handler {path!r}: {where} has no attribute {part!r}; check the spelling"
            ) from None
    needs_instance = False
    if len(parts) > 1 and isinstance(owner, type):
        import inspect

        raw = inspect.getattr_static(owner, parts[-1])
        needs_instance = not isinstance(raw, (staticmethod, classmethod)) and inspect.isfunction(
            raw
        )
    return target, owner, needs_instance


def _check_buildable(cls: type, path: str) -> None:
    # Checking the signature (not calling it) lets `mq check` validate a path
    # without running the handler's constructor in the parent.
    import inspect

    try:
        inspect.signature(cls).bind()
    except TypeError as exc:
        raise HandlerNotFound(
            f"handler {path!r}: class {cls.__name__} cannot be built with no arguments ({exc}); "
            "give its parameters defaults or point at a function"
        ) from None
    except ValueError:  # builtins without a signature: let the call decide
        pass


def _build(cls: type, path: str) -> object:
    _check_buildable(cls, path)
    try:
        return cls()
    except Exception as exc:
        raise HandlerNotFound(
            f"handler {path!r}: building {cls.__name__}() failed: {type(exc).__name__}: {exc}"
        ) from exc


def _not_callable(path: str, target: object) -> HandlerNotFound:
    return HandlerNotFound(
        f"handler {path!r} is a {type(target).__name__}, not something callable; "
        "point at a function, a class or a method"
    )


def load(path: str) -> Callable[[object], object]:
    """The callable a Python handler path names; classes are instantiated here, once."""
    if is_exec(path):
        raise HandlerNotFound(f"handler {path!r} is a program, not a Python handler")
    target, owner, needs_instance = _locate(path)
    if needs_instance:
        assert isinstance(owner, type)
        func: object = getattr(_build(owner, path), path.rsplit(".", 1)[1])
    elif isinstance(target, type):
        func = _build(target, path)
    else:
        func = target
    if not callable(func):
        raise _not_callable(path, func)
    return func


def exec_argv(path: str) -> list[str]:
    """The argv of an ``exec:`` handler, its program checked to exist and be executable."""
    import shlex
    import shutil

    command = path[len(EXEC_PREFIX) :]
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise HandlerNotFound(f"handler {path!r}: cannot split the command: {exc}") from None
    if not argv:
        raise HandlerNotFound(f"handler {path!r} names no command; write 'exec:PROGRAM ARGS...'")
    program = argv[0]
    if "/" in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise HandlerNotFound(
                f"handler {path!r}: {program} does not exist or is not executable; "
                "fix the path or its permissions"
            )
    elif shutil.which(program) is None:
        raise HandlerNotFound(
            f"handler {path!r}: program {program!r} not found on PATH "
            "(cron's PATH is short); use an absolute path"
        )
    return argv


def resolve(path: str) -> None:
    """Check a handler path without running a handler: raises HandlerNotFound if it is bad.

    Python modules are imported (their top-level code runs) but classes are
    not instantiated; a program must exist and be executable.
    """
    if is_exec(path):
        exec_argv(path)
        return
    target, owner, needs_instance = _locate(path)
    if needs_instance:
        assert isinstance(owner, type)
        _check_buildable(owner, path)
    elif isinstance(target, type):
        _check_buildable(target, path)
        if "__call__" not in dir(target):
            raise HandlerNotFound(
                f"handler {path!r}: instances of {target.__name__} are not callable; "
                "give it a __call__ method or name one of its methods"
            )
    elif not callable(target):
        raise _not_callable(path, target)


def standard_origin(path: str) -> str | None:
    """The standard-library module a Python handler comes from (``os:system`` ->
    ``os``; a re-exported one by its own module: ``posix``), else None.

    Such a handler is almost surely a slip, and a dangerous one: ``os:system``
    would run every payload as a shell command. Call after :func:`resolve`.
    """
    names: frozenset[str] = getattr(sys, "stdlib_module_names", frozenset())
    if is_exec(path):
        return None
    import inspect

    target = _locate(path)[0]
    modules = [path.partition(":")[0]]
    if inspect.isroutine(target) or inspect.isclass(target):
        modules.append(getattr(target, "__module__", None) or "")
    for module in modules:
        if module.split(".")[0] in names:
            return module
    return None


def only_from_cwd(path: str) -> str | None:
    """The current directory, when a Python handler's module is found there and
    nowhere else Python looks; else None. Call after :func:`resolve`.

    `mq check` run from a project's directory imports such a handler, but cron
    starts jobs in the home directory, where it is not found.
    """
    import importlib.util

    if is_exec(path):
        return None
    spec = importlib.util.find_spec(path.partition(":")[0].split(".")[0])
    if spec is None:
        return None
    if spec.origin and spec.submodule_search_locations is None:
        entry = os.path.dirname(spec.origin)  # a module: the directory holding it
    elif spec.submodule_search_locations:
        entry = os.path.dirname(list(spec.submodule_search_locations)[0])  # a package
    else:
        return None
    cwd = os.path.realpath(os.getcwd())
    declared = [
        os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
    if os.path.realpath(entry) == cwd and cwd not in declared:
        return cwd
    return None
