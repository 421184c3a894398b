"""Parser for the IDX format of the original MNIST distribution.

An IDX file is: two zero bytes; one byte naming the element type; one byte giving the number
of dimensions ``d``; ``d`` big-endian uint32 sizes; then the elements, big-endian, row-major.
(See http://yann.lecun.com/exdb/mnist/, "FILE FORMATS FOR THE MNIST DATABASE".)
"""

from __future__ import annotations

import math
import os

import numpy as np

from .errors import DataError

# Element-type byte -> big-endian numpy dtype, as listed in the format description.
_IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def parse_idx(raw: bytes, path: str | os.PathLike) -> np.ndarray:
    """Parse the bytes of an (uncompressed) IDX file into a numpy array.

    Checks the magic number, the element type and that the length is exactly what the header
    announces, so a truncated file (or one with trailing garbage) is reported, not silently
    reshaped. ``path`` is used only in error messages. The result has native byte order;
    uint8 data is returned as a read-only view of ``raw`` (no copy).

    Raises:
        DataError: naming ``path``, if the bytes are not a well-formed IDX file.
    """
    redownload = "Delete it and download it again (or put an intact copy there)."
    if len(raw) < 4:
        raise DataError(
            f"{path}: only {len(raw)} bytes long, too short for an IDX header; the file is "
            f"truncated. {redownload}"
        )
    zero0, zero1, type_code, ndim = raw[0], raw[1], raw[2], raw[3]
    if zero0 != 0 or zero1 != 0:
        raise DataError(
            f"{path}: not an IDX file (magic bytes {raw[:4].hex()} do not start with 0000; "
            f"is it still gzip-compressed, or a different file?). {redownload}"
        )
    if type_code not in _IDX_DTYPES:
        raise DataError(
            f"{path}: unknown IDX element type 0x{type_code:02x} in the header; the file is "
            f"corrupt. {redownload}"
        )
    header_len = 4 + 4 * ndim
    if len(raw) < header_len:
        raise DataError(
            f"{path}: the header announces {ndim} dimensions but the file ends after "
            f"{len(raw)} bytes; the file is truncated. {redownload}"
        )
    dims = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _IDX_DTYPES[type_code]
    expected = header_len + math.prod(dims) * dtype.itemsize
    if len(raw) != expected:
        state = "truncated" if len(raw) < expected else "followed by unexpected extra bytes"
        raise DataError(
            f"{path}: the IDX header announces shape {dims} ({expected:,} bytes in all) but "
            f"the file has {len(raw):,} bytes; it is {state}. {redownload}"
        )
    array = np.frombuffer(raw, dtype=dtype, offset=header_len).reshape(dims)
    if dtype.itemsize > 1:
        # Convert big-endian to native order once, so downstream code never pays for it.
        array = array.astype(dtype.newbyteorder("="))
    return array
