"""MkDocs hooks for the documentation site.

- The command-line reference (``cli.md``) is written at build time from the option table
  (``dask_hashcodes.cli.options``), the same table that builds the parser, ``--help`` and the config
  schema, so the page can never disagree with the program. Nothing generated is committed.
- ``<!-- include PATH -->`` (or ``<!-- include PATH untitled -->``, without the file's first
  heading) on a line of its own includes a committed file (a benchmark
  results table) by its path from the repository root: its headings are nested under the
  page's current heading and its relative links, which point at other results files rather
  than at pages of this site, become plain text. A missing file stops the build.
- The results' summary plots (``benchmarks/results/*.png``, ``recall/*.png``) are published
  under ``results/``.

Only the table's public surface is read (``COMMANDS``, ``options_of`` and each option's
``name``, ``flag``, ``help``, ``commands``, ``default_for``, ``choices``, ``type``, ``group``),
each through ``getattr`` with a fallback, so a renamed attribute degrades one column instead of
breaking the build.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

CLI_PAGE = "cli.md"
ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
_INCLUDE = re.compile(r"^<!-- include (\S+)( untitled)? -->$")
_HEADING = re.compile(r"^(#{1,6}) ")
_LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)\)")

# readable names of the option table's value types (by the callable's name)
_TYPE_NAMES = {
    "positive_int_list": "integers, comma-separated",
    "bit_count": "bits",
    "bit_counts": "bits, comma-separated",
    "name_list": "names, comma-separated",
    "json_object": "JSON object",
    "topology": "topology name",
    "date": "date YYYY-MM-DD",
    "boolean": "true or false",
    "text": "text",
    "str": "text",
    "int": "integer",
    "float": "number",
}


@event_priority(100)  # before mkdocstrings copies sys.path into its search paths
def on_config(config, **kwargs):
    # snippets resolve their base path against the working directory; anchor it at the
    # repository root so the site builds from anywhere
    snippets = config["mdx_configs"].get("pymdownx.snippets")
    if snippets is not None:
        snippets["base_path"] = [str(ROOT)]
    return config


def on_files(files, config, **kwargs):
    files.append(File.generated(config, CLI_PAGE, content=cli_reference()))
    for png in sorted([*RESULTS.glob("*.png"), *RESULTS.glob("recall/*.png")]):
        files.append(File.generated(config, f"results/{png.relative_to(RESULTS).as_posix()}", abs_src_path=str(png)))
    return files


def on_page_markdown(markdown, page, **kwargs):
    if "<!-- include " not in markdown:
        return markdown
    out, level, fenced = [], 1, False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else _INCLUDE.match(line.strip())
        if match:
            out.append(_included(match.group(1), level, page.file.src_uri, untitled=bool(match.group(2))))
            continue
        heading = None if fenced else _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
        out.append(line)
    return "\n".join(out) + "\n"


def _included(rel: str, level: int, where: str, *, untitled: bool = False) -> str:
    """The file at ``rel`` (from the repository root), headings nested below ``level``,
    relative links reduced to their text; ``untitled``: without its first heading (the page
    gives its own)."""
    path = (ROOT / rel).resolve()
    if not path.is_file() or ROOT not in path.parents:
        raise PluginError(f"{where}: included file {rel} does not exist; fix the include or restore the file")
    lines, fenced = [], False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            heading = _HEADING.match(line)
            if heading and untitled:
                untitled = False
                continue
            if heading:
                depth = min(6, len(heading.group(1)) + level)
                line = "#" * depth + line[len(heading.group(1)) :]
            line = _LINK.sub(lambda m: m.group(0) if re.match(r"[a-z]+://|#", m.group(2)) else m.group(1), line)
        lines.append(line)
    return "\n".join(lines)


def _cell(value) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(value).split()).replace("|", "\\|")


def _code(value) -> str:
    text = _cell(value)
    return f"`{text}`" if text else ""


def _type_name(opt) -> str:
    if getattr(opt, "switch", False):
        return "switch"
    choices = getattr(opt, "choices", None)
    if choices:
        return "one of " + ", ".join(f"`{_cell(c)}`" for c in choices)
    kind = getattr(opt, "type", None)
    what = getattr(kind, "what", None)  # a value type that says what it accepts ("a positive integer")
    if isinstance(what, str) and what:
        return _cell(what)
    name = getattr(kind, "__name__", "") if kind is not None else ""
    return _TYPE_NAMES.get(name, name.replace("_", " ") or "text")


def _default(opt, command: str) -> str:
    if getattr(opt, "switch", False):
        return ""
    default_for = getattr(opt, "default_for", None)
    try:
        value = default_for(command) if callable(default_for) else getattr(opt, "default", None)
    except Exception:  # an option whose default cannot be shown still gets its row
        value = None
    if value is None or value is False:
        return ""
    if isinstance(value, list | tuple):
        value = ",".join(map(str, value))
    return _code(value)


def _flag(opt) -> str:
    name = getattr(opt, "name", "?")
    if getattr(opt, "positional", False):
        return f"`{name.upper()}`"
    return f"`{getattr(opt, 'flag', '--' + name)}`"


def _help(opt, command: str) -> str:
    text = _cell(getattr(opt, "help", ""))
    if command in tuple(getattr(opt, "required", ()) or ()):
        text = "**required.** " + text
    return text


def _table(options, command: str) -> list[str]:
    lines = ["| option | value | default | meaning |", "|---|---|---|---|"]
    for opt in options:
        lines.append(f"| {_flag(opt)} | {_type_name(opt)} | {_default(opt, command)} | {_help(opt, command)} |")
    return lines


def _grouped(options) -> dict[str, list]:
    groups: dict[str, list] = {}
    for opt in options:
        groups.setdefault(str(getattr(opt, "group", "options") or "options"), []).append(opt)
    return groups


def cli_reference() -> str:
    from dask_hashcodes.cli import options as table

    commands = dict(getattr(table, "COMMANDS", {}))
    per_command = {cmd: list(table.options_of(cmd).values()) for cmd in commands}
    # options every command takes are listed once, at the top
    common_names = set.intersection(*({getattr(o, "name", None) for o in opts} for opts in per_command.values()))
    common = [o for o in next(iter(per_command.values()), []) if getattr(o, "name", None) in common_names]

    lines = [
        "# Command line",
        "",
        "Generated from the option table that also builds the parser, `dhash COMMAND --help`, the keys",
        "a `--config` file or a `dhash run` step may hold, and the config file's JSON schema",
        "(`data_schemas/config.schema.json`). `python -m dask_hashcodes.cli ...` is the same as `dhash ...`.",
        "",
        "Every option has one type, checked the same way on the command line, in a config file and",
        'in a `dhash run` step: counts are positive integers (a TOML `bits = 12.7` or `"12"` is',
        "refused, not truncated), switches are TOML `true`/`false`, and unknown keys and tables are",
        "refused. Bad input exits with status 2 and one line `error: <problem>; <fix>`, before any",
        "cluster starts where the problem can be known then, leaving no partial output.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    lines += [f"| [`dhash {cmd}`](#dhash-{cmd}) | {_cell(text)} |" for cmd, text in commands.items()]
    lines += [
        "",
        "## Options of every command",
        "",
        "A config file (`--config FILE.toml`) holds the long option names as keys, at the top or in a",
        "table named after the command; a `[storage-options]` table holds storage options. Flags",
        "given on the command line win over the file.",
        "",
        *_table(common, next(iter(commands), "")),
        "",
    ]
    # the method options (those setting an estimator parameter) are listed once, after the
    # commands: train, evaluate and demo take the same ones
    method_options = {}
    for cmd, text in commands.items():
        lines += [f"## dhash {cmd}", "", _cell(text) + ".", ""]
        own = [o for o in per_command[cmd] if getattr(o, "name", None) not in common_names]
        methods = [o for o in own if getattr(o, "param", None) is not None]
        for opt in methods:
            method_options.setdefault(id(opt), (opt, []))[1].append(cmd)
        if methods:
            lines += ["It also takes the [method options](#method-options).", ""]
        groups = _grouped([o for o in own if getattr(o, "param", None) is None])
        for group, opts in groups.items():
            if len(groups) > 1:
                lines += [f"**{_cell(group[:1].upper() + group[1:])}**", ""]
            lines += [*_table(opts, cmd), ""]
    if method_options:
        lines += [
            "## Method options",
            "",
            "Every parameter of every method's estimator is a flag `--{method}-{parameter}` (its",
            "underscores as hyphens), whose help is the parameter's entry in the estimator's docstring",
            "(see the [Python API](api/estimators.md)) and whose default is the estimator's; a few",
            "parameters also keep the shorter flag of earlier releases. Taken by "
            + ", ".join(f"`dhash {cmd}`" for cmd in sorted({c for _, cmds in method_options.values() for c in cmds}))
            + "; an option taken by some of them only says so.",
            "",
        ]
        options = [opt for opt, _ in method_options.values()]
        every = set.union(*(set(cmds) for _, cmds in method_options.values()))
        for group, opts in _grouped(options).items():
            lines += [f"**{_cell(group)}**", ""]
            rows = _table(opts, "")
            for i, opt in enumerate(opts):
                cmds = method_options[id(opt)][1]
                if set(cmds) != every:
                    rows[i + 2] = rows[i + 2][: -len(" |")] + f" ({', '.join('dhash ' + c for c in cmds)} only) |"
            lines += [*rows, ""]
    return "\n".join(lines) + "\n"
