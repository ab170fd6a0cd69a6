# Find objects by words.
detect()
for words in ["something yellow", "a round red fruit", "a plate"]:
    print(words, "->", find(words))
