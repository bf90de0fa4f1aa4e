"""Reading a framework's source without importing it (benchmarks/extract_framework_options.py):
a fetched git directory read at HEAD with `git show`, and the `ast` helpers that turn its
dataclass fields, function signatures, module names and literal `add_argument` calls into
JSON-able option records (name, default, choices, action, path)."""
from __future__ import annotations

import ast
import subprocess
from typing import Any

_MISSING = "<required>"


# ------------------------------------------------------------------ git and ast helpers
class Repo:
    """A fetched git directory read at HEAD."""

    def __init__(self, git_dir: str, name: str) -> None:
        self.git_dir, self.name = git_dir, name
        self.commit = self._git("rev-parse", "HEAD").strip()
        self._cache: dict[str, ast.Module] = {}

    def _git(self, *args: str) -> str:
        return subprocess.run(["git", "--git-dir", self.git_dir, *args], check=True,
                              capture_output=True, text=True).stdout

    def tree(self, path: str) -> ast.Module:
        if path not in self._cache:
            self._cache[path] = ast.parse(self._git("show", f"{self.commit}:{path}"))
        return self._cache[path]

    def find_class(self, name: str, under: str) -> str:
        """Path of the file under `under` that defines top-level class `name`."""
        found = subprocess.run(["git", "--git-dir", self.git_dir, "grep", "-l", "-E",
                                f"^class {name}\\b", self.commit, "--", under],
                               capture_output=True, text=True)  # exit 1: no match
        if found.returncode not in (0, 1):
            found.check_returncode()  # raises CalledProcessError
        out = found.stdout
        paths = [line.split(":", 1)[1] for line in out.splitlines()]
        if not paths:
            raise LookupError(f"class {name} not found under {under}")
        return sorted(paths, key=len)[0]


def literal(node: ast.AST | None) -> Any:
    """A JSON-able value for a default: the literal when it is one, else its source text."""
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return {"expr": ast.unparse(node)}
    if isinstance(value, (tuple, set)):
        return list(value)
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return {"expr": ast.unparse(node)}
    return value


def class_in(module: ast.Module, dotted: str) -> ast.ClassDef | None:
    """Class `A` or nested `A.Config` in a module."""
    body: list[ast.stmt] = module.body
    found = None
    for part in dotted.split("."):
        found = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if found is None:
            return None
        body = found.body
    return found


def strip_optional(ann: ast.AST) -> ast.AST:
    """X | None and Optional[X] -> X."""
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        sides = [s for s in (ann.left, ann.right) if not (isinstance(s, ast.Constant) and s.value is None)]
        if len(sides) == 1:
            return sides[0]
    if isinstance(ann, ast.Subscript) and ast.unparse(ann.value) in ("Optional", "typing.Optional"):
        return ann.slice
    return ann


def _literal_choices(ann: ast.AST) -> list[Any] | None:
    ann = strip_optional(ann)
    if isinstance(ann, ast.Subscript) and ast.unparse(ann.value) in ("Literal", "typing.Literal"):
        elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
        return [ast.literal_eval(e) for e in elts]
    return None


def _field_call(value: ast.AST | None) -> ast.Call | None:
    if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field", "Field"):
        return value
    return None


def keyword_arg(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def dataclass_fields(repo: Repo, path: str, dotted: str, under: str) -> dict[str, dict[str, Any]]:
    """Fields of a dataclass or pydantic model (bases first), each with its annotation,
    default (or '<required>'), choices (Literal) and the file that declares it."""
    cls = class_in(repo.tree(path), dotted)
    if cls is None:
        raise LookupError(f"{dotted} not in {path}")
    out: dict[str, dict[str, Any]] = {}
    for base in cls.bases:
        base_name = ast.unparse(base)
        if base_name.split(".")[0] in ("object", "Enum", "ABC", "DeepSpeedConfigModel", "BaseModel"):
            continue
        base_path = path if class_in(repo.tree(path), base_name) else locate(repo, base_name, under)
        if base_path:
            out.update(dataclass_fields(repo, base_path, base_name, under))
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = _one_field(node, path)
    return out


def locate(repo: Repo, dotted: str, under: str) -> str | None:
    try:
        return repo.find_class(dotted.split(".")[0], under)
    except LookupError:
        return None


def _one_field(node: ast.AnnAssign, path: str) -> dict[str, Any]:
    call = _field_call(node.value)
    entry: dict[str, Any] = {"annotation": ast.unparse(node.annotation), "path": path}
    if call is None:
        entry["default"] = _MISSING if node.value is None else literal(node.value)
    else:
        default = keyword_arg(call, "default") or (call.args[0] if call.args else None)
        factory = keyword_arg(call, "default_factory")
        entry["default"] = (literal(default) if default is not None else
                            {"factory": ast.unparse(factory)} if factory is not None else _MISSING)
        alias = keyword_arg(call, "alias")
        if alias is not None:
            entry["alias"] = literal(alias)
        init = keyword_arg(call, "init")
        if init is not None and literal(init) is False:
            entry["init"] = False
        meta = keyword_arg(call, "metadata")
        if isinstance(meta, ast.Dict):
            for k, v in zip(meta.keys, meta.values, strict=True):
                if k is not None and literal(k) == "argparse_meta":
                    entry["argparse_meta"] = _argparse_meta(v)
    choices = _literal_choices(node.annotation)
    if choices is not None:
        entry["choices"] = choices
    return entry


def _argparse_meta(node: ast.AST) -> dict[str, Any]:
    if not isinstance(node, ast.Dict):
        return {"expr": ast.unparse(node)}
    return {literal(k): (literal(v) if literal(k) != "type" else ast.unparse(v))
            for k, v in zip(node.keys, node.values, strict=True) if k is not None}


def function_params(repo: Repo, path: str, name: str) -> dict[str, Any]:
    """Parameters of a top-level function: name -> default (or '<required>')."""
    fn = next(n for n in repo.tree(path).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return _params(fn)


def method_params(repo: Repo, path: str, cls: str, name: str) -> dict[str, Any]:
    """Parameters of a method of a top-level class, without self."""
    found = class_in(repo.tree(path), cls)
    if found is None:
        raise LookupError(f"class {cls} not found in {path}")
    fn = next(n for n in found.body if isinstance(n, ast.FunctionDef) and n.name == name)
    return {k: v for k, v in _params(fn).items() if k != "self"}


def _params(fn: ast.FunctionDef) -> dict[str, Any]:
    a = fn.args
    params: dict[str, Any] = {}
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for arg, default in zip(positional, defaults, strict=True):
        params[arg.arg] = _MISSING if default is None else literal(default)
    for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        params[arg.arg] = _MISSING if default is None else literal(default)
    return params


def module_names(repo: Repo, path: str) -> list[str]:
    """Top-level names a module defines or imports (what `from module import X` can take)."""
    names: set[str] = set()
    for node in repo.tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return sorted(names)


# ------------------------------------------------------------------ argparse calls
def add_argument_calls(repo: Repo, path: str) -> dict[str, dict[str, Any]]:
    """Every literal `*.add_argument('--x', ...)` call in a file: option -> its settings."""
    out: dict[str, dict[str, Any]] = {}
    for node in ast.walk(repo.tree(path)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        names = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not names or not names[0].startswith("-"):
            continue
        settings = {k.arg: (ast.unparse(k.value) if k.arg == "type" else literal(k.value))
                    for k in node.keywords if k.arg in ("type", "default", "choices", "action", "dest", "nargs")}
        long_names = [n for n in names if n.startswith("--")]
        settings.setdefault("dest", (long_names or names)[0].lstrip("-").replace("-", "_"))
        settings.setdefault("action", "store")
        if settings["action"] in ("store_true", "store_false") and "default" not in settings:
            settings["default"] = settings["action"] == "store_false"
        settings["path"] = path
        for n in names:
            out[n] = settings
    return out
