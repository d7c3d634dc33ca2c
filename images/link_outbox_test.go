package images

import (
	"os/exec"
	"strings"
	"testing"
)

// runStubScript runs a Python program with the stub importable (python -I -S -B -c
// program dir) and fails the test unless it prints "ok" last.
func runStubScript(t *testing.T, program string) {
	t.Helper()
	python := needPython(t)
	_, dir := stubDir(t)
	cmd := exec.Command(python, "-I", "-S", "-B", "-c", "import sys;sys.path.insert(0,sys.argv[1])\n"+program, dir)
	out, err := cmd.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || lines[len(lines)-1] != "ok" {
		t.Fatalf("%v:\n%s", err, out)
	}
	if len(lines) > 1 {
		t.Logf("%s", strings.Join(lines[:len(lines)-1], "\n"))
	}
}

// The Outbox against a model written from the spec's words, over generated pushes and
// acks, plus the rules case by case.
const outboxProgram = `
import random
from kennel import _link
from kennel._link import Outbox, MAX_FRAMES, MAX_BYTES

assert (MAX_FRAMES, MAX_BYTES) == (4096, 64 << 20)

class Model:
    """The spec's outbox, kept as a plain list."""
    def __init__(self, frames, size):
        self.max_frames, self.max_bytes = frames, size
        self.items = []  # [seq, frame, key]
        self.last = 0
        self.dropped = 0
    def fits(self, n):
        return len(self.items) < self.max_frames and sum(len(i[1]) for i in self.items) + n <= self.max_bytes
    def push(self, frame, key):
        self.last += 1
        if key is not None:
            self.items = [i for i in self.items if i[2] != key]
        if len(frame) > self.max_bytes:
            self.dropped += 1
            return self.last
        while not self.fits(len(frame)) and any(i[2] is not None for i in self.items):
            self.items.remove(next(i for i in self.items if i[2] is not None))
            self.dropped += 1
        while not self.fits(len(frame)):
            self.items.pop(0)
            self.dropped += 1
        self.items.append([self.last, frame, key])
        return self.last
    def ack(self, n):
        self.items = [i for i in self.items if i[0] > n]

# Case by case.
o = Outbox()
assert [o.push(b"f%d" % i) for i in range(1, 6)] == [1, 2, 3, 4, 5]
o.ack(2)
assert list(o.pending()) == [(3, b"f3"), (4, b"f4"), (5, b"f5")]
assert list(o.pending(4)) == [(5, b"f5")]
o.ack(100)
assert list(o.pending()) == [] and o.bytes == 0 and o.push(b"x") == 6

o = Outbox()
for i in range(MAX_FRAMES + 10):
    o.push(b"%d" % i)
assert len(o) == MAX_FRAMES and o.dropped == 10
assert next(o.pending())[0] == 11, "the oldest go first"
assert o.take_dropped() == 10 and o.take_dropped() == 0

o = Outbox()
o.push(b"x" * (40 << 20))
o.push(b"y" * (30 << 20))
assert len(o) == 1 and o.dropped == 1 and o.bytes == 30 << 20, "64 MiB bound"
o.push(b"z" * ((64 << 20) + 1))
assert len(o) == 1 and o.dropped == 2 and o.last == 3, "a frame over the bound is dropped itself"

o = Outbox(max_frames=4)
o.push(b"plain-1")
o.push(b"obs-a1", "a")
o.push(b"obs-b1", "b")
o.push(b"plain-2")
o.push(b"plain-3")
assert [f for _, f in o.pending()] == [b"plain-1", b"obs-b1", b"plain-2", b"plain-3"], "coalescing go first"
assert o.dropped == 1
seq = o.push(b"obs-b2", "b")
assert [f for _, f in o.pending()] == [b"plain-1", b"plain-2", b"plain-3", b"obs-b2"], "replaced"
assert o.dropped == 1, "a replaced frame is not dropped"
assert seq == 6 and list(o.pending())[-1][0] == 6
o.push(b"plain-4")
assert [f for _, f in o.pending()] == [b"plain-1", b"plain-2", b"plain-3", b"plain-4"]
o.push(b"plain-5")
assert [f for _, f in o.pending()] == [b"plain-2", b"plain-3", b"plain-4", b"plain-5"]
assert o.dropped == 3

# batch: in order, past gaps, bounded by bytes (at least one frame).
o = Outbox(max_frames=8)
for i in range(1, 9):
    o.push(b"%d" % i, "k%d" % (i % 3) if i % 2 else None)
frames, cursor = o.batch(0)
assert [s for s, _ in frames] == [s for s, _ in o.pending()] and cursor == o.last
frames, cursor = o.batch(0, limit=1)
assert len(frames) == 1 and cursor == frames[0][0]
assert o.batch(o.last) == ([], o.last)

# Generated pushes and acks against the model.
rng = random.Random(7)
for round in range(30):
    frames, size = rng.choice([(4, 64), (16, 1000), (64, 300), (256, 4096)])
    o, m = Outbox(frames, size), Model(frames, size)
    acked = 0
    for step in range(1500):
        r = rng.random()
        if r < 0.75:
            frame = b"x" * rng.choice([0, 1, 7, 30, 64, 200, size // 3, size + 1])
            key = rng.choice([None, None, None, "a", "b", "c"])
            assert o.push(frame, key) == m.push(frame, key)
        elif r < 0.95:
            acked = rng.randint(acked, m.last)
            o.ack(acked)
            m.ack(acked)
        else:
            assert o.take_dropped() == m.dropped
            m.dropped = 0
        assert [(s, f) for s, f in o.pending()] == [(s, f) for s, f, _ in m.items], (round, step)
        assert o.bytes == sum(len(i[1]) for i in m.items)
        assert len(o) <= frames and o.bytes <= size
        cursor, got = rng.randint(0, m.last), []
        want = [(s, f) for s, f, _ in m.items if s > cursor]
        while True:
            batch, cursor = o.batch(cursor, limit=rng.choice([1, 100, 1 << 20]))
            got += batch
            if not batch and cursor >= o.last:
                break
        assert got == want, (round, step)

# withdraw: the matching frames go, uncounted, their seqs gaps; a coalescing one's key is free.
o = Outbox()
for f, key in [(b"a1", None), (b"b2", "k"), (b"a3", None), (b"c4", None)]:
    o.push(f, key)
assert o.withdraw(lambda f: f[:1] in (b"a", b"b")) == 3
assert [(s, f) for s, f in o.pending()] == [(4, b"c4")] and o.bytes == 2 and o.take_dropped() == 0
assert o.push(b"b5", "k") == 5 and [s for s, _ in o.pending()] == [4, 5]
assert o.batch(0) == ([(4, b"c4"), (5, b"b5")], 5)
assert _link._host_request_id(b'{"event":"host_request","id":"h7","type":"x","cell":"","args":{}}') == "h7"
assert _link._host_request_id(b'{"event":"done","id":"h7"}') is None
print("ok")
`

// TestLinkOutboxBoundsDropsAndCoalesces: the kernel's outbox keeps seqs gapless, drops
// the oldest coalescing frames and then the oldest frames past 4096 frames or 64 MiB,
// counts its drops until the hello takes them, and lets a coalescing frame replace its
// key's older one uncounted; generated pushes and acks agree with a model of the spec.
func TestLinkOutboxBoundsDropsAndCoalesces(t *testing.T) {
	t.Parallel()
	runStubScript(t, outboxProgram)
}

const envelopeProgram = `
from kennel import _link
from kennel._link import decode, encode, encode_ack, decode_attach, Fault, Inbox

inner = '{"type":"execute","id":"c1","code":"print(\'\u00e9\u4e2d\')  \\u00e9"}'.encode("utf-8")
line = encode(3, 2, inner + b"\n")
assert line == b'{"seq":3,"ack":2,"frame":' + inner + b'}\n'
assert decode(line) == (3, 2, inner), decode(line)
assert decode(line[:-1]) == (3, 2, inner)
assert decode(encode_ack(9)) == (None, 9, None)
# Whitespace and key order are read; the frame's bytes stay exactly as sent.
spaced = ' { "ack" : 0 ,\t"seq":1, "frame" :  { "type" : "x" , "id":"\u00e9" }  } '.encode("utf-8")
seq, ack, frame = decode(spaced)
assert (seq, ack) == (1, 0) and frame == '{ "type" : "x" , "id":"\u00e9" }'.encode("utf-8"), frame

faults = [
    b"", b"not json", b"[]", b"{}", b'{"ack":-1}', b'{"ack":1.0}', b'{"ack":true}', b'{"ack":1,"x":2}',
    b'{"seq":0,"ack":0,"frame":{}}', b'{"seq":1,"ack":0,"frame":[]}', b'{"seq":1,"ack":0}',
    b'{"seq":1,"ack":0,"frame":{},"x":1}', b'{"seq":1,"frame":{},"ack":0}',
    b'{"seq":1,"ack":0,"frame":{"a":NaN}}', b'{"seq":1,"ack":0,"frame":{}} x',
    b'{"seq":1,"seq":2,"frame":{}}', b'{"seq":1,"ack":0,"frame":{"a":"\xff"}}',
    b'{"seq":9007199254740992,"ack":0,"frame":{}}', b'{"seq":1,"ack":0,"frame":' + b"[" * 100000 + b"]" * 100000 + b"}",
]
for bad in faults:
    try:
        decode(bad)
    except Fault:
        continue
    raise AssertionError("decoded %r" % bad[:80])

good = b'{"attach":{"kernel":"k","token":"t","ack":4,"grace":2.5}}\n'
assert decode_attach(good) == ("k", "t", 4, 2.5, "", 0.0)
named = b'{"attach":{"kernel":"k","token":"t","ack":4,"grace":2.5,"controller":"c9","heartbeat":10}}\n'
assert decode_attach(named) == ("k", "t", 4, 2.5, "c9", 10.0)
for bad in [b"x", b'{"attach":1}', b'{"attach":{"kernel":"k","token":"t","ack":4}}',
            b'{"attach":{"kernel":"k","token":"t","ack":-4,"grace":1}}',
            b'{"attach":{"kernel":"k","token":"t","ack":4,"grace":-1}}',
            b'{"attach":{"kernel":"k","token":"t","ack":4,"grace":true}}',
            b'{"attach":{"kernel":"k","token":1,"ack":4,"grace":1}}',
            b'{"attach":{"kernel":"k","token":"t","ack":4,"grace":1},"x":1}',
            b'{"attach":{"kernel":"k","token":"t","ack":4,"grace":1,"controller":7}}',
            b'{"attach":{"kernel":"k","token":"t","ack":4,"grace":1,"heartbeat":-1}}',
            b'{"attach":{"kernel":"k","token":"t","ack":4,"grace":1,"heartbeat":"1"}}',
            b'{"attach":{"kernel":"k","token":"t","ack":4,"grace":1,"controller":"' + b"c" * 129 + b'"}}']:
    try:
        decode_attach(bad)
    except Fault:
        continue
    raise AssertionError("attach decoded %r" % bad)

i = Inbox()
assert [i.accept(s) for s in (1, 2, 2, 1, 5, 3, 6)] == [True, True, False, False, True, False, True]
assert i.last == 6
print("ok")
`

// TestLinkEnvelopeCodec: envelopes keep the inner frame byte for byte (non-ASCII and
// whitespace included), and every line that is not an envelope or an attach is a
// Fault.
func TestLinkEnvelopeCodec(t *testing.T) {
	t.Parallel()
	runStubScript(t, envelopeProgram)
}
