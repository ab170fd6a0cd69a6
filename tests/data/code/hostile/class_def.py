# expect: refused
class Escape:
    pass
