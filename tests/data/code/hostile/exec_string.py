# expect: refused
exec("import os")
