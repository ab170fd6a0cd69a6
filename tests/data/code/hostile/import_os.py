# expect: refused
import os
os.system("echo owned")
