"""Griffe extensions for the API reference (used by `mkdocs.yml`).

- `AsWritten`: annotations exactly as the source writes them. Griffe parses the
  strings inside subscripts as forward references, so jaxtyping's
  `Float[Array, "1"]` would show as `Float[Array, 1]` and `Shaped[Array, "..."]`
  as `Shaped[Array, ...]`; the shapes are part of the signature, so the source
  text is kept instead.
- `EquinoxInit`: an Equinox module's dataclass fields become its constructor's
  signature, with their annotations and defaults. Equinox builds `__init__` at
  class creation, so static analysis sees none, and mkdocstrings would show a
  module without a signature.
"""

import ast
import dataclasses
import functools
import inspect
import re
from pathlib import Path
from typing import Any

import griffe


@functools.cache
def _source(path: Path) -> str:
    return path.read_text()


def _as_written(obj: griffe.Object, node: ast.expr) -> str | None:
    path = obj.filepath
    if not isinstance(path, Path):
        return None
    text = ast.get_source_segment(_source(path), node)
    if text is None:
        return None
    text = re.sub(r"\s*\n\s*", " ", text)  # an annotation split over lines
    return re.sub(r",?\s*([\])])", r"\1", re.sub(r"([\[(])\s+", r"\1", text))


class AsWritten(griffe.Extension):
    def on_function_instance(
        self, *, node: ast.AST | griffe.ObjectNode, func: griffe.Function, **kwargs: Any
    ) -> None:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return
        args = node.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
        every += [a for a in (args.vararg, args.kwarg) if a is not None]
        for arg in every:
            if arg.annotation is not None and arg.arg in func.parameters:
                written = _as_written(func, arg.annotation)
                if written is not None:
                    func.parameters[arg.arg].annotation = written
        if node.returns is not None:
            written = _as_written(func, node.returns)
            if written is not None:
                func.returns = written

    def on_attribute_instance(
        self,
        *,
        node: ast.AST | griffe.ObjectNode,
        attr: griffe.Attribute,
        **kwargs: Any,
    ) -> None:
        if isinstance(node, ast.AnnAssign):
            written = _as_written(attr, node.annotation)
            if written is not None:
                attr.annotation = written


class EquinoxInit(griffe.Extension):
    def on_class_members(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        if "__init__" in cls.members:  # a hand-written constructor: keep it
            return
        try:
            runtime = griffe.dynamic_import(cls.path)
        except ImportError:
            return
        import equinox as eqx

        if not (isinstance(runtime, type) and issubclass(runtime, eqx.Module)):
            return
        # The constructor in use: one dataclasses generated (from the fields)
        # or one written in a base class, which the fields do not describe.
        owner = next(c for c in runtime.__mro__ if "__init__" in vars(c))
        # (unwrapped: a runtime type-checker may have wrapped it)
        code = getattr(inspect.unwrap(vars(owner)["__init__"]), "__code__", None)
        if not dataclasses.is_dataclass(runtime) or (
            code is not None and code.co_filename != "<string>"
        ):
            return
        keyword = griffe.ParameterKind.positional_or_keyword
        parameters = [griffe.Parameter("self", kind=keyword)]
        for field in dataclasses.fields(runtime):
            if not field.init:
                continue
            # A field may be declared in a base (the DQN family's, in
            # AbstractQAgent): inherited members are searched too.
            attribute = cls.members.get(field.name)
            if attribute is None:
                try:
                    attribute = cls.all_members.get(field.name)
                except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                    attribute = None
            annotation = getattr(attribute, "annotation", None)
            if annotation is None and isinstance(field.type, type):
                annotation = field.type.__name__
            if field.default is not dataclasses.MISSING:
                default = repr(field.default)
            elif field.default_factory is not dataclasses.MISSING:
                default = "..."
            else:
                default = None
            parameters.append(
                griffe.Parameter(
                    field.name,
                    annotation=annotation,
                    kind=keyword,
                    default=default,
                )
            )
        init = griffe.Function(
            "__init__",
            parameters=griffe.Parameters(*parameters),
            lineno=cls.lineno,
            endlineno=cls.lineno,
        )
        cls.set_member("__init__", init)
