"""The bytes the lessons' programs put on the wire (one place for the peer
and the tests)."""

_CYCLE = bytes(1 + i % 251 for i in range(251))


def cycle(n, shift=0):
    """Bytes 1 + (i + shift) % 251 for i in 0..n-1."""
    shift %= 251
    reps = (n + shift) // 251 + 1
    return (_CYCLE * reps)[shift:shift + n]


def lesson06(n):
    """Lessons 06/07: byte i is 1 + i % 251."""
    return cycle(n)


def msg(seq, side, n):
    """Lesson 05's message `seq` from `side` ('c' or 's'): byte i is
    1 + (i + 7 * seq + side) % 251."""
    return cycle(n, 7 * seq + ord(side))


def first_mismatch(got, expected):
    if got == expected:
        return None
    for i, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            return i
    return min(len(got), len(expected))


def corrupt(data, offset):
    """`data` with byte `offset` changed to another non-zero value."""
    b = bytearray(data)
    b[offset] = b[offset] ^ 0xff or 0x5a
    return bytes(b)
