# expect: refused
g = (x for x in [])
outer = g.gi_frame.f_back
print(outer.f_globals)
