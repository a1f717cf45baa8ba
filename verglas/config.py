"""verglas's switches: one small object, `verglas.config`.

Each switch is an attribute. Reading it gives the value set on the object, else its
`VERGLAS_*` environment variable as it is now (read at each use, so a variable set after
`import verglas` counts too), else the default. Setting it overrides the environment for this
process; `del config.<switch>` goes back to it. A value that makes no sense, set or in the
environment, is a ValueError naming the switch or the variable.

Every switch takes effect at the next compile (tracing and strictness: at the next rewrite
run); a Function already compiled keeps the code it has. What changes generated code is part
of the CPU runner's cache key, so no stored program built with other settings is reused.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["Config", "config"]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
VECTOR_WIDTHS = (0, 128, 256, 512)
LOG_LEVELS = ("debug", "info", "warning", "error")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _flag(value, where: str) -> bool:
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
    elif isinstance(value, bool) or value in (0, 1):
        return bool(value)
    raise ValueError(f"{where} must be 1 or 0 (true/false, yes/no, on/off), not {value!r}")


def _path(value, where: str) -> Path:
    if isinstance(value, (str, os.PathLike)) and str(value):
        return Path(value).expanduser()
    raise ValueError(f"{where} must be a directory path, not {value!r}")


def _width(value, where: str) -> int | None:
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "auto":
            return None
        value = int(text) if text.isdigit() else text
    if value is None or (type(value) is int and value in VECTOR_WIDTHS):
        return value
    raise ValueError(f"{where} must be 'auto' (None), 0 (LLVM's choice), 128, 256 or 512 "
                     f"(bits), not {value!r}")


def _bytes(value, where: str) -> int:
    if isinstance(value, str):  # 2147483648, 2G, 2GiB, 512M, 512 MB: units of 1024
        text = value.strip().upper().removesuffix("B").removesuffix("I").strip()
        unit = text[-1:] if text[-1:] in _UNITS else ""
        number = text[:len(text) - len(unit)].strip()
        if number.isdigit():
            value = int(number) * _UNITS[unit]
    if type(value) is int and value > 0:
        return value
    raise ValueError(f"{where} must be a positive number of bytes (e.g. 2147483648, 2G or "
                     f"512M), not {value!r}")


def _level(value, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in LOG_LEVELS:
        return value.strip().lower()
    raise ValueError(f"{where} must be one of {', '.join(LOG_LEVELS)}, not {value!r}")


def _trace(value, where: str) -> bool | str:
    if isinstance(value, str) and value.strip().lower() == "profile":
        return "profile"
    try:
        return _flag(value, where)
    except ValueError:
        raise ValueError(f"{where} must be 1, 0 or 'profile', not {value!r}") from None


class _Switch:
    """One switch: its environment variable, how a value is read, its default."""

    def __init__(self, variable: str, parse, default, doc: str):
        self.variable = variable
        self.parse = parse
        self.default = default
        self.__doc__ = doc

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if self.name in obj._set:
            return obj._set[self.name]
        text = os.environ.get(self.variable, "")
        if text == "":
            return self.default() if callable(self.default) else self.default
        return self.parse(text, f"{self.variable}={text!r}")

    def __set__(self, obj, value) -> None:
        obj._set[self.name] = self.parse(value, f"verglas.config.{self.name}")

    def __delete__(self, obj) -> None:
        obj._set.pop(self.name, None)


class Config:
    """verglas's switches (see the module docstring and README's table)."""

    cache_dir = _Switch(
        "VERGLAS_CACHE_DIR", _path, lambda: Path.home() / ".cache" / "verglas",
        "Where optimized graphs, generated sources and machine code are stored.")
    cache_max_bytes = _Switch(
        "VERGLAS_CACHE_MAX_BYTES", _bytes, 2 << 30,
        "The cache directory's size limit: a store past it evicts least recently used entries.")
    threads = _Switch(
        "VERGLAS_THREADS", _flag, True,
        "Row loops and large elementwise loops may run on numba's thread pool (when a "
        "concurrency-safe layer loads).")
    compile_processes = _Switch(
        "VERGLAS_COMPILE_PROCESSES", _flag, True,
        "A forked helper process compiles beside this one (Linux, two CPUs or more): a stored "
        "CPU program's row functions and kernels, a CUDA program's kernels at its first call.")
    workspace = _Switch(
        "VERGLAS_WORKSPACE", _flag, True,
        "Temporaries live in a per-thread workspace kept between calls (False: allocated at "
        "every call).")
    vector_width = _Switch(
        "VERGLAS_VECTOR_WIDTH", _width, None,
        "The vector width (bits) LLVM should prefer: None picks 512 on AVX-512 machines, 0 "
        "leaves it to LLVM.")
    numpy_blas = _Switch(
        "VERGLAS_NUMPY_BLAS", _flag, True,
        "Matrix products call numpy's own CBLAS where its wheel ships one (else numba's).")
    trace_rewrites = _Switch(
        "VERGLAS_TRACE_REWRITES", _trace, False,
        "Print every rewrite that fires (True), or a time / fire profile ('profile').")
    strict_rewrites = _Switch(
        "VERGLAS_STRICT_REWRITES", _flag, False,
        "A failing rewrite fails the compile (else it is skipped with a warning).")
    log = _Switch(
        "VERGLAS_LOG", _level, None,
        "Print the 'verglas' logger's records at this level and above on stderr (None: "
        "only the handlers the application attached).")

    def __init__(self):
        object.__setattr__(self, "_set", {})

    def __setattr__(self, name: str, value) -> None:
        if not isinstance(getattr(type(self), name, None), _Switch):
            raise AttributeError(f"verglas.config has no switch {name!r}; switches: "
                                 f"{', '.join(self.switches())}")
        super().__setattr__(name, value)

    @classmethod
    def switches(cls) -> list[str]:
        """The switches' names, in the order of README's table."""
        return [name for name, value in vars(cls).items() if isinstance(value, _Switch)]

    def __repr__(self):
        lines = []
        for name in self.switches():
            switch = vars(type(self))[name]
            origin = ("set" if name in self._set else
                      switch.variable if os.environ.get(switch.variable) else "default")
            lines.append(f"    {name}={getattr(self, name)!r},  # {origin}")
        return "Config(\n" + "\n".join(lines) + "\n)"


config = Config()
