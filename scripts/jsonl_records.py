"""JSON-lines records (one JSON value per non-blank line), read with errors a user can act on.

Shared by scripts/claims.py and scripts/lra-table.py, which read the LRA-style records
(docs/lra-cpu.jsonl, docs/lra-seeds.jsonl, scripts/lra.sh's results.jsonl).
"""
import json


class RecordError(Exception):
    """A records file that cannot be read; the message names the file and, if any, the line."""


def read_json_lines(path):
    """[(line number from 1, parsed value)] for the non-blank lines of the file at `path`.

    Raises RecordError when the file cannot be opened, is not UTF-8 text, or has a line that
    is not JSON. What each value must hold is the caller's to check.
    """
    try:
        with open(path, encoding="utf-8") as f:
            raw = [(k + 1, line) for k, line in enumerate(f) if line.strip()]
    except OSError as e:
        raise RecordError(f"{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise RecordError(f"{path}: not UTF-8 text (expected JSON lines)") from None
    out = []
    for number, text in raw:
        try:
            out.append((number, json.loads(text)))
        except json.JSONDecodeError as e:
            raise RecordError(f"{path}, line {number}: not a JSON object ({e.msg})") from None
    return out
