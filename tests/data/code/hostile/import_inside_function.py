# expect: refused
def helper():
    import importlib
    return importlib.import_module("os")
helper()
