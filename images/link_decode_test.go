package images

import "testing"

// The compact reading of envelopes (the form both sides write) against the general one,
// over generated envelopes and mutations of them: wherever the compact reading answers,
// the general one gives the same answer, and it answers the canonical form itself.
const decodeProgram = `
import json, random
from kennel._link import Fault, _decode_any, _decode_compact, decode, encode, encode_ack

rng = random.Random(7)
ALPHABET = ['a', '"', '\\\\', '{', '}', '[', ']', ',', ':', ' ', '\u00e9', '\u4e2d', '\n', '0']

def value(depth=0):
    kind = rng.randrange(7 if depth < 4 else 4)
    if kind == 0:
        return rng.randrange(-10**6, 10**6)
    if kind == 1:
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randrange(6)))
    if kind == 2:
        return rng.choice([None, True, False, 1.5])
    if kind == 3:
        return "x"
    if kind == 4:
        return [value(depth + 1) for _ in range(rng.randrange(3))]
    return {"k%d" % i: value(depth + 1) for i in range(rng.randrange(3))}

def frame():
    f = {"type": "execute", "id": "c%d" % rng.randrange(100)}
    f.update({"f%d" % i: value() for i in range(rng.randrange(3))})
    return json.dumps(f, ensure_ascii=rng.random() < 0.5, separators=(",", ":")).encode("utf-8")

def reading(fn, line):
    try:
        return fn(line)
    except Fault:
        return "fault"

def mutate(line):
    line = bytearray(line)
    for _ in range(rng.randrange(1, 3)):
        op = rng.randrange(4)
        i = rng.randrange(len(line) + 1)
        if op == 0 and i < len(line):
            line[i] = rng.choice(b'{}[],:"0123456789 \\nx\\xff')
        elif op == 1 and i < len(line):
            del line[i]
        elif op == 2:
            line[i:i] = rng.choice([b"}", b"{", b",", b'"x":1', b'"x":{}', b"0", b" ", b"\\n"])
        else:
            del line[i:]
    return bytes(line)

compact = 0
for n in range(3000):
    seq, ack = rng.choice([1, 2, 10, 2**53 - 1, 2**53]), rng.choice([0, 1, 99, 2**53 - 1, 2**53])
    line = encode(seq, ack, frame()) if rng.random() < 0.9 else encode_ack(ack)
    for candidate in [line, line[:-1]] + [mutate(line) for _ in range(4)]:
        general = reading(_decode_any, candidate)
        fast = _decode_compact(candidate)
        if fast is not None:
            assert fast == general, (candidate, fast, general)
            compact += 1
        assert reading(decode, candidate) == general, candidate
    if seq < 2**53 and ack < 2**53:
        assert _decode_compact(line) is not None, line
assert compact > 2000, compact
print("ok")
`

// TestLinkCompactDecodeAgreesWithTheGeneralOne: the kernel's fast reading of compact
// envelopes never answers differently from reading the line member by member.
func TestLinkCompactDecodeAgreesWithTheGeneralOne(t *testing.T) {
	t.Parallel()
	runStubScript(t, decodeProgram)
}
