"""User documents validated once, at the boundary, by schema (pydantic).

Every file a user writes (layer specs, scenarios, catalogs, device profiles) is described by a
:class:`Document` model: fields with their types and bounds, unknown fields refused. :func:`parse` turns the
first thing wrong into one :class:`~traincast.errors.SpecError` line naming the file, the field and what was
expected (with close matches for a mistyped field name); inside traincast the validated records are trusted.

Sizes are bounded by what any accelerator could hold (``MAX_DIM``: no tensor dimension above 2^31 - 1,
``MAX_LAYERS``): a document asking for more is refused rather than traced for hours.
"""

from __future__ import annotations

import re
import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from traincast.errors import SpecError, suggest

MAX_DIM = 2**31 - 1  # one tensor dimension (int32 indexing of the kernels)
MAX_LAYERS = 100_000

PositiveDim = Annotated[int, Field(strict=True, ge=1, le=MAX_DIM)]
NonNegativeFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class Document(BaseModel):
    """A user document (or a part of one): unknown fields are errors; strings, numbers and booleans are not
    coerced into one another (``"32"`` is not 32, 1 is not True)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)


def parse(model: type[BaseModel], data: Any, where: str):
    """``data`` validated as ``model``; SpecError ``"<where>: <field>: <what was expected> (got <value>)"``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(describe(exc, model, where)) from None


def describe(exc: ValidationError, model: type[BaseModel], where: str) -> str:
    """One line for the most telling error of ``exc``: a mistyped field name first (it is usually also the
    cause of a 'missing' one), then a wrong value, then a missing field; of equals, the deepest."""
    order = {"extra_forbidden": 0, "union_tag_invalid": 1, "missing": 3}
    # among errors of one kind, the deepest: of a union's members, the one the value came closest to matching
    err = min(exc.errors(include_url=False), key=lambda e: (order.get(e.get("type", ""), 2), -len(e.get("loc", ()))))
    loc = tuple(err.get("loc", ()))
    path = _path(loc, model)
    value = err.get("input")
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        field_name = str(loc[-1]) if loc else "?"
        known = _known_fields(loc[:-1], model)
        hint = ""
        if known:
            close = suggest(field_name, known)
            hint = (f"; did you mean {', '.join(map(repr, close))}?" if close
                    else f"; known fields: {', '.join(known)}")
        return f"{where}: {path or 'document'}: unknown field{hint}"
    if kind == "missing":
        return f"{where}: {path}: missing (required)"
    if kind == "union_tag_invalid":
        ctx = err.get("ctx") or {}
        tags = [t.strip(" '\"") for t in str(ctx.get("expected_tags", "")).split(",") if t.strip()]
        tag = str(ctx.get("tag", value))
        close = suggest(tag, tags)
        hint = f"did you mean {', '.join(map(repr, close))}?" if close else f"known: {', '.join(tags)}"
        return f"{where}: {path}: unknown {ctx.get('discriminator', 'type').strip(chr(39))} {tag!r}; {hint}"
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    if kind == "literal_error" and isinstance(value, str):
        expected = [t.strip(" '\"") for t in re.split(r",| or ", str((err.get("ctx") or {}).get("expected", "")))]
        close = suggest(value, [t for t in expected if t])
        if close:
            return f"{where}: {path}: unknown value {value!r}; did you mean {', '.join(map(repr, close))}?"
    return f"{where}: {path or 'document'}: {err.get('msg', 'invalid')} (got {shown})"


def _path(loc: tuple, model: type[BaseModel]) -> str:
    """``layers[2].filters`` from pydantic's loc (union tags and function-validator steps left out)."""
    out = ""
    ann: Any = model
    for part in loc:
        if part == "[key]":  # the key of a mapping was wrong (its value is the path's last part)
            continue
        ann, keep = _step(ann, part)
        if not keep:
            if (isinstance(part, str) and not part.startswith(("function-", "lax-", "strict-"))
                    and not (isinstance(ann, type) and part == ann.__name__)):
                out += f" ({part})"  # the union member by its tag: layers[0] (conv2d).filters
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _known_fields(loc: tuple, model: type[BaseModel]) -> list[str]:
    ann: Any = model
    for part in loc:
        ann, _ = _step(ann, part)
    ann = _unwrap(ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return [f.alias or name for name, f in ann.model_fields.items()]
    return []


def _unwrap(ann):
    while typing.get_origin(ann) is Annotated:
        ann = typing.get_args(ann)[0]
    return ann


def _step(ann, part) -> tuple[Any, bool]:
    """The annotation one loc step below ``ann``, and whether the step is a real field/index (not a union tag
    or a validator's name)."""
    ann = _unwrap(ann)
    origin = typing.get_origin(ann)
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        fields = ann.model_fields
        for name, f in fields.items():
            if part in (name, f.alias):
                return f.annotation, True
        return None, True
    if origin in (list, tuple, set, frozenset) and isinstance(part, int):
        args = typing.get_args(ann)
        return (args[0] if args else None), True
    if origin is dict:
        args = typing.get_args(ann)
        return (args[1] if len(args) == 2 else None), True
    if origin in (Union, types.UnionType):
        members = [a for a in map(_unwrap, typing.get_args(ann)) if a is not type(None)]
        if len(members) == 1:  # Optional[X]
            return _step(members[0], part)
        models = [a for a in members if isinstance(a, type) and issubclass(a, BaseModel)]
        named = next((m for m in members if isinstance(m, type) and part == m.__name__), None)
        if named is not None:  # pydantic names a union member by its class: a step into it, not a field
            return named, False
        if len(models) == 1 and not any(typing.get_origin(f.annotation) is Literal for f in models[0].model_fields.values()):
            return _step(models[0], part)  # Optional[Model]: a field of the model
        for arg in typing.get_args(ann):
            arg = _unwrap(arg)
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                tag_field = next((f for f in arg.model_fields.values()
                                  if typing.get_origin(f.annotation) is Literal and part in typing.get_args(f.annotation)),
                                 None)
                if tag_field is not None:
                    return arg, False
        return ann, False
    return None, not isinstance(part, str) or not part.startswith(("function-", "lax-", "strict-"))
