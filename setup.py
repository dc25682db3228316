"""The one native module: bkledger.wire._native (batched CRC32C; the bookie's AddRequest parse, batch checks and
journal record). Optional: where it cannot be built, the install goes on, the client uses google-crc32c one
entry at a time and the bookie its Python forms of the same (wire/native.py)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("bkledger.wire._native", ["wire/_native.c", "wire/_add_request.c"],
                             depends=["wire/_native.h"], optional=True, extra_compile_args=["-O2"])])
