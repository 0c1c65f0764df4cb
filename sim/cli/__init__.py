"""The ``sim`` command line: thin parsers over the layers below (run, kv, sweep, compare, serve) and
the hand-off of ``sim validate`` to the ``validation`` package.

The only part of ``sim`` that may name ``validation``, and only when that command runs.
"""
