"""A griffe extension for the API reference: an Equinox module's dataclass
fields become its constructor's signature, with the annotations as written in
the source (jaxtyping shapes included) and the defaults the fields hold.

Equinox builds `__init__` at class creation, so static analysis sees none, and
mkdocstrings would show a module without a signature. Used by `mkdocs.yml`.
"""

import dataclasses
from typing import Any

import griffe


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
        code = getattr(vars(owner)["__init__"], "__code__", None)
        if not dataclasses.is_dataclass(runtime) or (
            code is not None and code.co_filename != "<string>"
        ):
            return
        keyword = griffe.ParameterKind.positional_or_keyword
        parameters = [griffe.Parameter("self", kind=keyword)]
        for field in dataclasses.fields(runtime):
            if not field.init:
                continue
            attribute = cls.members.get(field.name)
            annotation = getattr(attribute, "annotation", None)
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
