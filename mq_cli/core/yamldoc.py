"""A config file read as plain values that still know their lines: every error
names the file, the line and the key path."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mq_cli.core.errors import ConfigError

if TYPE_CHECKING:
    import yaml


class Located:
    """A YAML document as plain values plus the line of every key path."""

    def __init__(self, source: str):
        self.source = source
        self.lines: dict[tuple[str, ...], int] = {}
        self._constructor: yaml.constructor.SafeConstructor | None = None

    @property
    def constructor(self) -> yaml.constructor.SafeConstructor:
        # Made on first use: with no config file, yaml is never imported (~10 ms).
        if self._constructor is None:
            import yaml

            self._constructor = yaml.constructor.SafeConstructor()
        return self._constructor

    def where(self, path: tuple[str, ...]) -> str:
        key = ".".join(path)
        # A missing key (database.database) has no line: name the mapping that lacks it.
        lines = (self.lines.get(path[:n]) for n in range(len(path), 0, -1))
        line = next((n for n in lines if n), None)
        return f"{self.source}, line {line}: {key}" if line else f"{self.source}: {key}"

    def error(self, path: tuple[str, ...], message: str) -> ConfigError:
        return ConfigError(f"{self.where(path)}: {message}")

    def convert(self, node: yaml.Node, path: tuple[str, ...]) -> Any:
        import yaml

        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                key = str(self.constructor.construct_object(key_node, deep=True))
                child = (*path, key)
                if key in result:
                    self.lines[child] = key_node.start_mark.line + 1
                    raise self.error(child, "duplicate key")
                self.lines[child] = key_node.start_mark.line + 1
                result[key] = self.convert(value_node, child)
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(item, (*path, str(i))) for i, item in enumerate(node.value)]
        return self.constructor.construct_object(node, deep=True)


def read_yaml(path: str) -> tuple[dict[str, Any], Located]:
    import yaml  # only when there is a file: keeps the zero-config start fast

    located = Located(path)
    try:
        with open(path, encoding="utf-8") as handle:
            node = yaml.compose(handle, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = f", line {mark.line + 1}" if mark else ""
        # An unclosed bracket or quote is noticed lines later (even past the
        # end); the context mark says where the construct started.
        started = ""
        if exc.context and exc.context_mark and (not mark or exc.context_mark.line != mark.line):
            started = f" ({exc.context}, started on line {exc.context_mark.line + 1})"
        raise ConfigError(f"{path}{line}: invalid YAML: {exc.problem}{started}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    if node is None:
        return {}, located
    try:
        data = located.convert(node, ())
    except yaml.MarkedYAMLError as exc:  # a tag the safe loader refuses (!!python/name:...)
        mark = exc.problem_mark or exc.context_mark
        line = f", line {mark.line + 1}" if mark else ""
        problem = exc.problem or exc.context or "unsupported value"
        raise ConfigError(f"{path}{line}: invalid YAML: {problem}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping of keys (database, queues, ...)")
    return data, located
