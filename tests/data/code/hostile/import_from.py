# expect: refused
from subprocess import run
run(["id"])
