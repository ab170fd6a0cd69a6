# expect: refused
raise SystemExit(3)
