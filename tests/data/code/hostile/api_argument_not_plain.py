# expect: error
pick(detect)
