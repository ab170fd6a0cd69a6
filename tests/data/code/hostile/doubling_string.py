# expect: memory
text = "x"
for i in range(64):
    text = text + text
