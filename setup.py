"""The one native module: bkledger.wire._native (batched CRC32C). Optional: where it cannot be built,
the install goes on and the client uses google-crc32c one entry at a time (wire/native.py)."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("bkledger.wire._native", ["wire/_native.c"], optional=True,
                             extra_compile_args=["-O2"])])
