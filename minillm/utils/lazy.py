"""Lazy exports for a package: names are imported from their modules on first use, so importing
the package (and `python -m minillm --help`) stays fast and pulls in no heavy dependency."""

from importlib import import_module


def lazy_exports(package: str, namespace: dict, exports: dict[str, str]):
    """`__getattr__` and `__dir__` for `package`, whose `exports` map a name to its module."""

    def __getattr__(name):
        if name in exports:
            module = import_module(f".{exports[name]}", package)
            value = getattr(module, name)
            if name in vars(module):  # not a name the module works out at each read
                namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
