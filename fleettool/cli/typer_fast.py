"""Option values without pydantic where the answer is certain.

typer (0.29) converts every option value, defaults included, through a pydantic TypeAdapter built on first use:
the first one imports pydantic and typer._adapters (~70 ms on the dev box) and each adapter costs more, on every
command, even `fleettool agent --help` (the root's completion options are converted before the subcommand runs).
Most of fleettool's options are plain `str`, `bool`, `int`/`float` with bounds, `Path` and lists of those, where
the result is known without pydantic: a `str` stays itself, an integer written as digits is that integer, a
path is `Path(value)` checked by typer's own `coerce_cli_path`. `install()` makes typer's parameters try that
first and hand anything else (a bad number, a bound crossed, an Enum, bytes, an empty path) to typer's own
adapter, unchanged, so its messages and results stay the ones users see.
`tests/test_cli_startup.py` checks both give the same value for every option of every command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin

_MISS = object()
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")


def _in_bounds(v: float, info: Any) -> bool:
    return (info.min is None or v >= info.min) and (info.max is None or v <= info.max)


def _leaf(value: Any, annotation: Any, info: Any, param: Any, ctx: Any) -> Any:
    """The value typer's adapter would give, or _MISS where that is not certain."""
    if info.parser is not None or info.clamp:
        return _MISS
    if annotation is str:
        return value if isinstance(value, str) else _MISS
    if annotation is bool:
        return value if isinstance(value, bool) else _MISS
    if annotation is int:
        if type(value) is int:
            v = value
        elif isinstance(value, str) and _INT.fullmatch(value):
            v = int(value)
        else:
            return _MISS
        return v if _in_bounds(v, info) else _MISS
    if annotation is float:
        if type(value) is float:
            f = value
        elif isinstance(value, str) and _FLOAT.fullmatch(value):
            f = float(value)
        else:
            return _MISS
        return f if _in_bounds(f, info) else _MISS
    if annotation is Path and info.path_type is None:
        from typer._param_types import coerce_cli_path

        if isinstance(value, str) and value:
            value = Path(value)
        if not isinstance(value, Path):
            return _MISS
        return coerce_cli_path(value, info, path_type=Path, param=param, ctx=ctx)
    return _MISS


def fast_value(value: Any, annotation: Any, info: Any, param: Any = None, ctx: Any = None) -> Any:
    """`value` converted as typer would, or _MISS: a leaf, or a list of leaves (all of them, or _MISS)."""
    if get_origin(annotation) is list:
        (inner,) = get_args(annotation) or (None,)
        if inner is None or not isinstance(value, (list, tuple)):
            return _MISS
        out = [_leaf(v, inner, info, param, ctx) for v in value]
        return _MISS if any(o is _MISS for o in out) else out
    return _leaf(value, annotation, info, param, ctx)


def install() -> bool:
    """Make typer's parameters convert through `fast_value` first. False (typer left as it is) where this
    typer has not the internals it was written against."""
    try:
        from typer import core
        from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    except ImportError:
        return False
    tp = getattr(core, "_TyperParameter", None)
    if tp is None or not hasattr(tp, "get_runtime_param") or getattr(tp, "_fleettool_fast", False):
        return tp is not None and getattr(tp, "_fleettool_fast", False)

    @dataclass(frozen=True)
    class FastRuntimeParam(RuntimeParam):
        descriptor: TypeDescriptor | None = None
        _typer: list[RuntimeParam] = field(default_factory=list)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            d = self.descriptor
            assert d is not None
            if d.file_annotation is None:
                got = fast_value(value, d.annotation, d.parameter_info, param, ctx)
                if got is not _MISS:
                    return got
            if not self._typer:  # typer's own adapter, built once, only where it is needed
                self._typer.append(build_runtime_param(d))
            return self._typer[0]._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self: Any) -> RuntimeParam:
        if self._runtime_param is None:
            d = self.type_descriptor
            self._runtime_param = FastRuntimeParam(
                parameter_info=d.parameter_info, annotation=d.annotation, descriptor=d
            )
        return self._runtime_param

    tp.get_runtime_param = get_runtime_param
    tp._fleettool_fast = True
    return True
