# expect: wall
wait(10**9)
