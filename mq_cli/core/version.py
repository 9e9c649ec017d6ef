"""This release's version, and the table layout it writes."""

__version__ = "0.1.0"
#: the table layout this release writes; recorded in <table>_meta by `mq init`
SCHEMA_VERSION = 5
