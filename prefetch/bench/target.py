"""``module:function`` as the harness's command line names the user's code: resolved to a
callable, with an error that says what was wrong (``TargetError``) instead of a traceback."""
import importlib
import os
import sys


class TargetError(Exception):
    """A ``--loader``/``--step``/``--transform`` argument that does not name a usable function;
    the message says which part was wrong. ``python -m prefetch.bench`` prints it and exits 2."""


def resolve(spec, option="--loader"):
    """The callable ``spec`` names, as ``"package.module:function"`` (``function`` may be dotted:
    ``module:Class.method``). The current directory is importable, as with ``python -m``."""
    if not isinstance(spec, str) or spec.count(":") != 1:
        raise TargetError("%s %r: expected module:function (e.g. %s my_train:make_loader), "
                          "with exactly one colon" % (option, spec, option))
    module_name, attr = (part.strip() for part in spec.split(":"))
    if not module_name or not attr:
        raise TargetError("%s %r: expected module:function, got an empty %s"
                          % (option, spec, "module" if not module_name else "function"))
    if module_name.endswith(".py") or os.sep in module_name:
        dotted = module_name[:-3] if module_name.endswith(".py") else module_name
        raise TargetError("%s %r: name the module, not its file: %s:%s (run from the directory "
                          "that holds it, or put that directory on PYTHONPATH)"
                          % (option, spec, dotted.strip(os.sep).replace(os.sep, "."), attr))
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise TargetError("%s %r: no module named %r (looked in the current directory %s "
                              "and sys.path)" % (option, spec, exc.name, cwd)) from None
        raise TargetError("%s %r: importing %r failed: %s: %s"
                          % (option, spec, module_name, type(exc).__name__, exc)) from exc
    except Exception as exc:  # noqa: BLE001 - the user's module failed at import: say so
        raise TargetError("%s %r: importing %r raised %s: %s"
                          % (option, spec, module_name, type(exc).__name__, exc)) from exc
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError("%s %r: module %r (%s) has no attribute %r"
                              % (option, spec, module_name,
                                 getattr(module, "__file__", "?"), attr)) from None
    if not callable(obj):
        raise TargetError("%s %r: %s.%s is a %s, not a function"
                          % (option, spec, module_name, attr, type(obj).__name__))
    return obj


def call_factory(fn, spec, option, what):
    """``fn()``, naming ``spec`` if it raises."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - the user's factory failed: say which
        raise TargetError("%s %r: calling it to get %s raised %s: %s"
                          % (option, spec, what, type(exc).__name__, exc)) from exc
