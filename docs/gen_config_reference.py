"""Writes the configuration reference, docs/reference/configuration.md, from the schema and the group options.

    python docs/gen_config_reference.py

Every key's type and default come from the dataclasses in kmt/config/schema.py, its why from the trailing `# ...`
comment on its line (and the comment-only lines that continue it), or from the field's metadata for the `decode`
group, which is made from the search options `kmt.inference.settings` declares; each option under conf/ is listed with
what it sets.
`reference_page()` returns the page's text; tests/test_config.py checks the committed page against it.
"""

import ast
import dataclasses
import io
import re
import sys
import tokenize
import types
import typing
from pathlib import Path

import yaml
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without kmt installed

from kmt.config import schema  # noqa: E402

CONF = ROOT / "conf"
SCHEMA = ROOT / "kmt" / "config" / "schema.py"
PAGE = ROOT / "docs" / "reference" / "configuration.md"
GROUP_CLASSES = {
    "data": schema.DataConfig,
    "model": schema.ModelConfig,
    "optim": schema.OptimConfig,
    "trainer": schema.TrainerConfig,
}
OPTION_GROUPS = ("data", "model", "optim", "trainer", "debug")  # conf/<group>/*.yaml; experiments have a section
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<item>- )?(?P<key>[^:#]+):(?: +(?P<value>[^#]*?))?\s*(?:#\s?(?P<why>.*))?$")


def field_whys(source):
    """{(class name, field name): why}: each field's trailing comment and the comment-only lines right after it."""
    comments, code_lines = {}, set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
        elif token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            code_lines.update(range(token.start[0], token.end[0] + 1))
    whys = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for statement in node.body:
            if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
                continue
            parts = [comments[line] for line in range(statement.lineno, statement.end_lineno + 1) if line in comments]
            line = statement.end_lineno + 1
            while line in comments and line not in code_lines:
                parts.append(comments[line])
                line += 1
            whys[node.name, statement.target.id] = " ".join(parts)
    return whys


def markdown(text):
    """`text` safe in a table cell: HTML and emphasis characters escaped outside `code spans`."""
    pieces = text.split("`")
    for i in range(0, len(pieces), 2):
        pieces[i] = (
            pieces[i]
            .replace("&", "&amp;")
            .replace("<", "&lt;")
            .replace(">", "&gt;")
            .replace("*", "\\*")
            .replace("|", "\\|")
        )
    return "`".join(pieces)


def yaml_value(value):
    """A value as it is written in YAML and on the command line, in a code span."""
    if isinstance(value, str) and value == "":
        return "`''`"
    text = OmegaConf.to_yaml({"v": value}).strip()[3:]
    if "\n" in text:  # a list or a mapping: on one line, as on the command line
        text = yaml.safe_dump(OmegaConf.to_container(OmegaConf.create({"v": value}))["v"], default_flow_style=True)
        text = " ".join(text.split())
    return f"`{text}`"


def type_name(annotation):
    if typing.get_origin(annotation) is list:
        return f"list of {type_name(typing.get_args(annotation)[0])}"
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):  # Optional[X] or X | None
        return " or ".join("null" if arg is type(None) else arg.__name__ for arg in typing.get_args(annotation))
    return annotation.__name__


def anchor(section):
    return re.sub(r"[^a-z]+", "-", section.lower())


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def schema_sections():
    """[(section title, dataclass)] in the order a reader meets them, and {dataclass: section title}."""
    sections = [("top level", schema.Config)]
    titles = {}

    def visit(prefix, cls):
        by_class = {}
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(f.type):
                by_class.setdefault(f.type, []).append(f"{prefix}{f.name}")
            elif typing.get_origin(f.type) is list and dataclasses.is_dataclass(typing.get_args(f.type)[0]):
                by_class.setdefault(typing.get_args(f.type)[0], []).append(f"{prefix}{f.name}[i]")  # each entry
        for sub, names in by_class.items():
            title = ", ".join(names)
            titles[prefix, sub] = title
            sections.append((title, sub))
            visit(names[0] + ".", sub)

    visit("", schema.Config)
    return sections, titles


def key_table(cls, prefix, titles, whys):
    rows = []
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        if dataclasses.is_dataclass(f.type):
            title = titles[prefix, f.type]
            default = f"[{title}](#{anchor(title)})"
            kind = "group"
        else:
            default = yaml_value(f.default_factory() if f.default is dataclasses.MISSING else f.default)
            kind = type_name(f.type)
        why = whys.get((cls.__name__, f.name)) or f.metadata.get("why", "")  # a made dataclass's: its metadata
        rows.append([f"`{key}`", kind, default, markdown(why)])
    return table(["key", "type", "default", "why"], rows)


def option_file(path):
    """(description, [(dotted key, value text, why)], [defaults entries]) of a conf/ YAML file, read line by line
    so that each value keeps the comment written beside it."""
    description, settings, defaults, stack, in_header = [], [], [], [], True
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            if in_header and text != "@package _global_":
                description.append(text)
            continue
        in_header = False
        match = KEY_LINE.match(raw)
        if not match:
            continue
        indent, key, value, why = len(match["indent"]), match["key"], match["value"], match["why"] or ""
        if match["item"]:  # an entry of the defaults list: `- override /model: small`
            defaults.append((f"{key.split()[-1].lstrip('/')}={value}", markdown(why)))
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if value:
            settings.append((".".join([name for _, name in stack] + [key]), value, markdown(why)))
        else:
            stack.append((indent, key))
    return description, settings, defaults


def in_group(group, path, description, settings, defaults):
    """An option file's settings relative to its group: a `# @package _global_` option (e.g. `data=prepared`, which
    also names the run) sets `group.key` for its group's keys, and its other settings join its description."""
    if not path.read_text().lstrip().startswith("# @package _global_"):
        return description, settings, defaults
    prefix = f"{group}."
    inside = [(key[len(prefix) :], value, why) for key, value, why in settings if key.startswith(prefix)]
    outside = [
        f"Also sets `{key}={value}`" + (f": {why}" if why else ".")
        for key, value, why in settings
        if not key.startswith(prefix)
    ]
    return [*description, *outside], inside, defaults


def composed_default(group):
    defaults = OmegaConf.to_container(OmegaConf.load(CONF / "config.yaml").defaults)
    return next(entry[group] for entry in defaults if isinstance(entry, dict) and group in entry)


def group_options(group):
    """A table of conf/<group>/*.yaml: each option's description and, in one column per key any option sets, the
    value it composes to (the schema's default where it sets none)."""
    paths = sorted((CONF / group).glob("*.yaml"))
    parsed = {path.stem: in_group(group, path, *option_file(path)) for path in paths}
    keys = list(dict.fromkeys(key for _, settings, _ in parsed.values() for key, _, _ in settings))
    if group in GROUP_CLASSES:
        base = OmegaConf.structured(GROUP_CLASSES[group])
        values = {
            name: OmegaConf.merge(
                base,
                OmegaConf.create(dict(OmegaConf.from_dotlist([f"{key}={value}" for key, value, _ in parsed[name][1]]))),
            )
            for name in parsed
        }
        if group == "model":  # presets from the smallest up
            parsed = dict(
                sorted(parsed.items(), key=lambda item: (values[item[0]].hidden_dim, values[item[0]].num_layers))
            )
        default = composed_default(group)
        rows = [
            [f"`{group}={name}`" + (" (default)" if name == default else "")]
            + [yaml_value(OmegaConf.select(values[name], key)) for key in keys]
            + [sentences(description)]
            for name, (description, _, _) in parsed.items()
        ]
        return table(["option"] + [f"`{key}`" for key in keys] + ["what it is"], rows)
    rows = [
        [f"`{group}={name}`", sentences(description), ", ".join(f"`{key}={value}`" for key, value, _ in settings)]
        for name, (description, settings, _) in parsed.items()
    ]
    return table(["option", "what it is", "what it sets"], rows)


def sentences(lines):
    return markdown(" ".join(lines))


def experiments():
    lines = []
    for path in sorted((CONF / "experiment").glob("*.yaml")):
        description, settings, defaults = option_file(path)
        commands = [line for line in description if line.startswith("kmt-train ")]
        about = [line for line in description if line not in commands]
        lines += ["", f"### {path.stem}", "", sentences(about), ""]
        lines += [f"```bash\n{command}\n```\n" for command in commands]
        if (ROOT / "docs" / "experiments" / f"{path.stem}.md").exists():
            lines += [f"How it was chosen: [experiments: {path.stem}](../experiments/{path.stem}.md).", ""]
        rows = [[f"`{choice}`", why] for choice, why in defaults]
        rows += [[f"`{key}={value}`", why] for key, value, why in settings]
        lines += table(["setting", "why"], rows)
    return lines


def reference_page():
    """The text of docs/reference/configuration.md."""
    whys = field_whys(SCHEMA.read_text())
    sections, titles = schema_sections()
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by docs/gen_config_reference.py from kmt/config/schema.py and conf/: edit those, then run",
        "     `python docs/gen_config_reference.py`. -->",
        "",
        "`kmt-train` composes its config with [Hydra](https://hydra.cc) from `conf/config.yaml`, whose defaults list "
        "picks one option of each group (`data=dates model=tiny optim=noam trainer=default`), onto the schema in "
        "`kmt/config/schema.py`. The schema holds every default: the defaults below are exactly what `kmt-train` "
        "runs with no overrides (the generated dates task), and every other option sets only what differs. Hydra "
        "refuses unknown keys and values of the wrong type.",
        "",
        "- Pick a group option with `group=option` (`model=small`), set a value with `group.key=value` "
        "(`optim.warmup_steps=800`), add a recipe with `experiment=NAME`.",
        "- Print the composed config with `kmt-train --cfg job`; every run saves its own as `config.yaml`.",
        "- Your own config directory composes on top with `kmt-train --config-dir DIR`: a `DIR/model/mine.yaml` "
        "is then `model=mine`.",
        "",
        "## Keys",
    ]
    for title, cls in sections:
        names = title.split(", ")
        prefix = (
            ""
            if cls is schema.Config
            else (
                names[0] + "."
                if len(names) == 1
                else names[0].rsplit(".", 1)[0] + ".{" + ",".join(name.rsplit(".", 1)[1] for name in names) + "}."
            )
        )
        lines += ["", f"### {title} {{#{anchor(title)}}}", ""]
        if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
            lines += [markdown(" ".join(cls.__doc__.split())), ""]
        lines += key_table(cls, prefix, titles, whys)
    lines += [
        "",
        "## Group options",
        "",
        "Each option is a file `conf/<group>/<option>.yaml` holding only what differs from the schema; the "
        "tables show the value each option composes to for every key any option of its group sets.",
    ]
    for group in OPTION_GROUPS:
        lines += ["", f"### {group} {{#options-{group}}}", ""] + group_options(group)
    lines += [
        "",
        "## Experiments",
        "",
        "Recipes under `conf/experiment/`, run with `kmt-train experiment=NAME`: overrides of the group "
        "options they pick, each value with its why. The runs that chose them are in the "
        "[experiments](../experiments/index.md) pages.",
    ]
    lines += experiments()
    return "\n".join(lines) + "\n"


def main():
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(reference_page())
    print(f"wrote {PAGE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
