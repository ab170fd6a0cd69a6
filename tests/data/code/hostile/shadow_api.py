# expect: refused
pick = lambda name: None
pick("apple")
