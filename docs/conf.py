"""Sphinx configuration of the moesym documentation.

Build (CI runs the same, warnings as errors, internal references checked):

    python -m sphinx -W --keep-going -n -b html docs docs/_build/html

Sources are Markdown (MyST), the same dialect as the README. External links are not fetched in
CI (the build machines reach no web sites); internal links, anchors and cross-references are
checked by ``-n`` and fail the build as warnings.
"""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "moesym"
author = "moesym developers"
copyright = "moesym developers, Apache-2.0"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.mathjax"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "README.md"]
html_theme = "furo"
html_title = "moesym"
html_static_path = []

autodoc_typehints = "none"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True}
# type names in signatures and docstrings point at NumPy, SymPy and the standard library, whose
# inventories are not fetched offline: only references into these pages are checked
nitpick_ignore_regex = [(r"py:.*", r".*")]


def _plain_text_docstring(app, what, name, obj, options, lines):
    """moesym's docstrings are plain text: an indented formula line under a sentence is a
    continuation, not reStructuredText's block quote. Give such a run a blank line before it so
    docutils reads it as a quote instead of warning (a list item's own continuation lines, two
    columns in, stay as they are); a bar is an absolute value, not a substitution."""
    out, prev_indent, prev_blank, bullet = [], 0, True, None
    for line in lines:
        blank = not line.strip()
        indent = len(line) - len(line.lstrip())
        if line.lstrip().startswith(("* ", "- ")):
            bullet = indent
        elif blank:
            bullet = None
        in_item = bullet is not None and indent == bullet + 2
        if (not blank and not prev_blank and indent != prev_indent and not in_item
                and not out[-1].rstrip().endswith("::")):
            out.append("")
        out.append(line.replace("|", "\\|"))
        if not blank:
            prev_indent = indent
        prev_blank = blank
    lines[:] = out


def setup(app):
    app.connect("autodoc-process-docstring", _plain_text_docstring)
