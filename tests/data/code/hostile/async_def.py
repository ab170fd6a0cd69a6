# expect: refused
async def go():
    await home()
