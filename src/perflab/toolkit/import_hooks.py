"""Run code right after a module is first imported, without importing it (perflab's bootstrap must not import
torch itself: a script that sets environment variables before `import torch` keeps working, and a program that
never compiles never pays for importing torch._dynamo)."""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any, Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback: Callable[[Any], None]):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module, callback = spec.loader.exec_module, self.callback

        def exec_then_callback(module):
            exec_module(module)
            callback(module)

        spec.loader.exec_module = exec_then_callback  # type: ignore[method-assign]
        return spec


def when_imported(name: str, callback: Callable[[Any], None]) -> None:
    """Call `callback(module)` now if `name` is imported, else right after its first import."""
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))
