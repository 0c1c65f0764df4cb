"""One error type for every bad input, so the CLI can print one line and exit 2."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Callable


class ConfigError(Exception):
    """Bad user input: which file, which key path, what is wrong and what is allowed.

    ``str(err)`` is ``"<file>: <key.path>: <message>"``; the CLI prefixes ``error: ``.
    """

    def __init__(self, file: str, key: str, message: str) -> None:
        # one line, whatever the input held: control characters escaped, parts bounded
        file, key, message = one_line(file, _MAX_PART), one_line(key, _MAX_PART), one_line(message)
        super().__init__(f"{file}: {key}: {message}")
        self.file = file
        self.key = key
        self.message = message

    def __reduce__(self):
        # rebuilt from its three parts, so it crosses a process pool (run.py --jobs 2) intact
        return (type(self), (self.file, self.key, self.message))


def cli_exit_code(command: Callable[[], int]) -> int:
    """Run one CLI command: bad input ends in one ``error: ...`` line on stderr and status
    2, Ctrl-C in status 130; a reader that stops reading (``sim kv --json | head``) ends it
    quietly; never a traceback for any of them."""
    try:
        return command()
    except BrokenPipeError:
        # Python would complain again when it flushes stdout at exit: point stdout at nothing.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # stdout is not a file (io.UnsupportedOperation is both)
            pass
        return 141  # as a shell reports a command ended by SIGPIPE
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


#: Options whose value may begin with "-" (``--set seed=-1``, ``--set -.inf``): argparse would
#: read such a value as another option, so the value is attached (``--set=-.inf``) before
#: parsing and reaches the command, which names the scenario and the assignment at fault.
DASH_VALUE_OPTIONS = ("--set", "--grid")


class OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one ConfigError line instead of a usage dump and exit 2."""

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102
        args = sys.argv[1:] if args is None else list(args)
        attached, i = [], 0
        while i < len(args):
            if args[i] in DASH_VALUE_OPTIONS and i + 1 < len(args) and args[i + 1].startswith("-"):
                attached.append(f"{args[i]}={args[i + 1]}")
                i += 2
            else:
                attached.append(args[i])
                i += 1
        return super().parse_known_args(attached, namespace)

    def error(self, message: str):  # noqa: D102
        m = re.match(r"argument ([^:]+): (.*)", message, re.S)
        key, text = (m.group(1), m.group(2)) if m else ("arguments", message)
        raise ConfigError("<cli>", key, f"{' '.join(text.split())} (see {self.prog} --help)")


# ------------------------------------------------------------------ bounded, safe reading

#: Largest input file read (scenario and calibration YAML, traces are bounded separately).
MAX_YAML_BYTES = 8 << 20
#: Deepest nesting of a YAML document, aliases expanded (scenarios need 4 levels).
MAX_YAML_DEPTH = 64
#: Most nodes of a YAML document with every alias expanded (billion laughs stop here).
MAX_YAML_NODES = 1_000_000
_MAX_PART = 300  # characters of one part of an error line (file, key) before "..."


def unlink_symlink(path) -> None:
    """Before writing a file at ``path``: a symlink there is removed, so the write makes a new
    file at ``path`` and never goes through the link to wherever it points (as
    sim.outputs.files.write_atomic replaces one)."""
    path = os.fspath(path)
    if os.path.islink(path):
        os.unlink(path)


def did_you_mean(word: str, choices) -> str:
    """`` (did you mean 'x'?)`` naming the closest of ``choices`` to ``word`` (up to three), or ""."""
    import difflib  # noqa: PLC0415

    word, names = str(word).lower(), [str(c) for c in choices]
    starts = sorted(c for c in names if word and c.startswith(word))  # 'h100': the h100-* ones first
    close = list(dict.fromkeys(starts + difflib.get_close_matches(word, names, n=3, cutoff=0.6)))[:3]
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def one_line(text: str, limit: int = 4 * _MAX_PART) -> str:
    """``text`` as one printable line: control characters escaped, at most ``limit`` characters."""
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(text))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def read_bytes(path, *, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a regular file, at most ``max_bytes``; ConfigError(path, "<file>", ...)
    for a missing file, a directory, a FIFO or device (never opened: it could block), an
    unreadable or a too large file."""
    import os  # noqa: PLC0415
    import stat  # noqa: PLC0415

    file = str(path)
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        raise ConfigError(file, "<file>", f"{what} not found") from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(file, "<file>", f"is a directory; expected a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(file, "<file>", f"not a regular file (a FIFO, socket or device); expected a {what}")
    if st.st_size > max_bytes:
        raise ConfigError(file, "<file>", f"{st.st_size} bytes; the most a {what} may have is {max_bytes}")
    try:
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)  # /proc files say size 0: read with the bound anyway
    except OSError as exc:
        raise ConfigError(file, "<file>", f"cannot read: {exc.strerror or type(exc).__name__}") from None
    if len(data) > max_bytes:
        raise ConfigError(file, "<file>", f"more than {max_bytes} bytes; the most a {what} may have")
    return data


def decode_utf8(data: bytes, file: str, key: str = "<file>") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(file, key, f"not UTF-8 text (invalid byte at offset {exc.start})") from None


def read_yaml_file(path, *, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """Read and parse a YAML file safely: bounded size, UTF-8, bounded depth and alias
    expansion (see parse_yaml). Every problem is a ConfigError naming the file."""
    file = str(path)
    return parse_yaml(decode_utf8(read_bytes(path, max_bytes=max_bytes, what="YAML file"), file), file)


#: The last text parsed of each file and its value (by absolute path): a run reads its calibration
#: twice (the profile's batch defaults, then the run), a sweep or plan once per point.
_PARSED: dict[str, tuple[str, Any]] = {}
_PARSED_MAX = 64


def read_yaml_file_once(path, *, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """``read_yaml_file``'s value: the file is read every time, its text parsed again only when it
    differs from the last text parsed of that file; each call gets its own copy (the caller may
    change it). Errors are raised anew on every call."""
    import copy  # noqa: PLC0415

    file = str(path)
    text = decode_utf8(read_bytes(path, max_bytes=max_bytes, what="YAML file"), file)
    key = os.path.abspath(file)
    hit = _PARSED.get(key)
    if hit is None or hit[0] != text:
        hit = (text, parse_yaml(text, file))
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = hit
    return copy.deepcopy(hit[1])


def parse_yaml(text: str, file: str, key: str | None = None) -> Any:
    """``yaml.safe_load`` that refuses, with one ConfigError, what could hang or exhaust
    memory later: nesting deeper than MAX_YAML_DEPTH, aliases that expand past
    MAX_YAML_NODES nodes (billion laughs) or refer to themselves. ``key`` names the
    error's key (``--set``'s key path); by default the line of the problem."""
    import yaml  # noqa: PLC0415

    loader = None
    try:
        loader = _safe_loader()(text)
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(node, file, key)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = key or (f"line {mark.line + 1}" if mark is not None else "<yaml>")
        problem = getattr(exc, "problem", None) or type(exc).__name__
        if isinstance(exc, yaml.reader.ReaderError):
            problem = f"unacceptable character #x{exc.character:04x} at position {exc.position}"
        raise ConfigError(file, where, f"malformed YAML: {problem}") from None
    except (ValueError, OverflowError, TypeError, RecursionError) as exc:
        # a 5000-digit integer, an impossible date, an unhashable key the constructor let by
        raise ConfigError(file, key or "<yaml>", "malformed YAML: a value that cannot be represented "
                          f"(an integer of thousands of digits, an impossible date; {type(exc).__name__})") from None
    finally:
        if loader is not None:
            loader.dispose()


def _safe_loader():
    import yaml  # noqa: PLC0415

    class _DepthLimitedLoader(yaml.SafeLoader):
        """The composer is the one recursive part of PyYAML: stop it before it goes deep."""

        _depth = 0

        def compose_node(self, parent, index):
            self._depth += 1
            try:
                if self._depth > MAX_YAML_DEPTH:
                    raise yaml.composer.ComposerError(
                        None, None, f"nesting deeper than {MAX_YAML_DEPTH} levels", self.peek_event().start_mark)
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

    return _DepthLimitedLoader


def _check_expansion(root, file: str, key: str | None) -> None:
    """Count the nodes of the document with aliases expanded (memoized, so a billion laughs
    costs one visit per distinct node) and its depth; refuse cycles."""
    import yaml  # noqa: PLC0415

    memo: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, depth)
    active: set[int] = set()

    def fail(msg: str):
        raise ConfigError(file, key or "<yaml>", msg)

    def walk(node, level: int) -> tuple[int, int]:
        if level > MAX_YAML_DEPTH:
            fail(f"nesting deeper than {MAX_YAML_DEPTH} levels (aliases expanded)")
        nid = id(node)
        if nid in memo:
            size, depth = memo[nid]
            if level + depth - 1 > MAX_YAML_DEPTH:
                fail(f"nesting deeper than {MAX_YAML_DEPTH} levels (aliases expanded)")
            return size, depth
        if nid in active:
            fail("an alias refers to the node that contains it (a recursive document)")
        if isinstance(node, yaml.ScalarNode):
            return 1, 1
        active.add(nid)
        if isinstance(node, yaml.MappingNode):  # a repeated key: YAML keeps the last one, silently
            seen: dict = {}
            for k, _ in node.value:
                if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                    if k.value in seen:
                        raise ConfigError(file, key or f"line {k.start_mark.line + 1}", (
                            f"the key {k.value!r}"[:120] + f" appears twice in one mapping (first at line "
                            f"{seen[k.value] + 1}); YAML would keep only the last: write it once"))
                    seen[k.value] = k.start_mark.line
        children = node.value if isinstance(node, yaml.SequenceNode) else [c for kv in node.value for c in kv]
        size, depth = 1, 1
        for child in children:
            s, d = walk(child, level + 1)
            size += s
            depth = max(depth, d + 1)
            if size > MAX_YAML_NODES:
                fail(f"more than {MAX_YAML_NODES} values once aliases are expanded "
                     "(an alias bomb?); write the values out or use fewer aliases")
        active.discard(nid)
        memo[nid] = (size, depth)
        return size, depth

    walk(root, 1)
