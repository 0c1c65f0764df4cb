"""Where a page's plotly.js comes from (``--plotly``).

- ``inline`` (default): inside the page, once (about 4.6 MB): the page works anywhere, offline;
- ``cdn``: a ``<script>`` that loads the same plotly.js release from cdn.plot.ly (a page of a
  few hundred KB that needs the network to draw);
- ``folder``: ``plotly.min.js`` written once beside the page, in its output folder, and
  loaded from there: many pages in one folder share one copy; move the folder whole.
"""

from __future__ import annotations

from pathlib import Path

MODES = ("inline", "cdn", "folder")
FILE = "plotly.min.js"


def _js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def cdn_url() -> str:
    from plotly.offline import get_plotlyjs_version

    return f"https://cdn.plot.ly/plotly-{get_plotlyjs_version()}.min.js"


def write_folder_copy(out_dir: Path) -> None:
    """``plotly.min.js`` in ``out_dir`` (rewritten only when it differs from the installed one)."""
    from sim.outputs.files import write_atomic

    path, js = Path(out_dir) / FILE, _js()
    if path.is_symlink() or not path.is_file() or path.read_text(encoding="utf-8", errors="replace") != js:
        write_atomic(path, js)


def include(mode: str, out_dir: Path | None):
    """plotly's ``include_plotlyjs`` for ``mode`` (``folder``: writes the copy in ``out_dir``)."""
    if mode == "cdn":
        return "cdn"
    if mode == "folder" and out_dir is not None:
        write_folder_copy(out_dir)
        return FILE
    return True


def script_tag(mode: str, out_dir: Path | None) -> str:
    """The ``<script>`` element of a hand-written page, for ``mode``."""
    if mode == "cdn":
        return f'<script src="{cdn_url()}" charset="utf-8"></script>'
    if mode == "folder" and out_dir is not None:
        write_folder_copy(out_dir)
        return f'<script src="{FILE}" charset="utf-8"></script>'
    return f"<script>{_js()}</script>"


def add_plotly_flag(p, page: str) -> None:
    """``--plotly inline|cdn|folder`` (sim/outputs/plotlyjs.py) for a command writing ``page``."""
    p.add_argument("--plotly", choices=list(MODES), default="inline",
                   help=f"where {page}'s plotly.js comes from: inline in the page (default, ~4.6 MB, works "
                        f"offline), cdn (cdn.plot.ly: a small page that needs the network), or folder "
                        f"(plotly.min.js written once beside it in the output folder)")
