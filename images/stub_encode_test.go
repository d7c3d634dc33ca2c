package images

import "testing"

// TestStreamFramesAreTheGeneralEncoding: the stub's stream frame encoder (its fast path
// for plain ASCII text and its general one) writes, byte for byte, the frame the general
// encoder writes, for any text (generated: ASCII, control characters, quotes, escapes,
// non-ASCII, astral characters, lone surrogates).
func TestStreamFramesAreTheGeneralEncoding(t *testing.T) {
	t.Parallel()
	runStubScript(t, encodeProgram)
}

const encodeProgram = `
import random
from kennel import _frames

rng = random.Random(7)
every = [chr(c) for c in range(0x80)] + ["\u00e9", "\u4e2d", "\U0001f600", "\ud800", "\udfff", "\u2028", "\x85"]
plain = ["x", "y", " ", "\n", "0", "~", "{", "}"]
for run in range(20000):
    pool = rng.choice([every, plain, plain + ['"'], plain + ["\\"], plain + ["\x7f"], plain + ["\t", "\r"], plain + ["\x00"]])
    text = "".join(rng.choice(pool) for _ in range(rng.choice([0, 1, 3, 40, 2000])))
    owner = rng.choice(["c1", "", "native", 'c"2'])
    name = rng.choice(["stdout", "stderr"])
    got = _frames.encode_stream(owner, name, text)
    want = _frames.encode("stream", owner, (("name", name), ("text", text)))
    assert got == want, (text, got, want)
print("ok")
`
