"""GPT-2's byte-level alphabet, from its definition: the printable Latin-1 bytes ('!'..'~',
0xA1..0xAC, 0xAE..0xFF) stand for themselves, the other 68 bytes for U+0100, U+0101, ... in byte
order. Shared by the reference scripts that build byte-level vocabularies."""


def byte_to_unicode():
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table
