# expect: memory
text = "x" * 10**10
