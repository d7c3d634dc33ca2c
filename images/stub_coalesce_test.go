package images

import "testing"

// TestStreamCoalescingKeepsTheStream: however the stub's writes of stream text are split
// and timed, with other frames between them and owners and streams changing, the frames
// on the channel carry exactly the text written, in order, each other frame where it was
// written relative to the text around it, and no stream frame over STREAM_CHUNK: the
// coalescing is invisible but for where frames are cut (generated, 200 runs).
func TestStreamCoalescingKeepsTheStream(t *testing.T) {
	t.Parallel()
	runStubScript(t, coalesceProgram)
}

const coalesceProgram = `
import json, os, random, threading, time
from kennel import _frames

class FakeKernel:
    main_ident = -1
    critical = 0
    pending_interrupt = False
    def current(self):
        return None

def merged(events):
    """Consecutive stream text of the same owner and name joined: what is to be kept."""
    out = []
    for e in events:
        if e[0] == "stream" and out and out[-1][0] == "stream" and out[-1][1:3] == e[1:3]:
            out[-1] = ("stream", e[1], e[2], out[-1][3] + e[3])
        else:
            out.append(e)
    return out

rng = random.Random(11)
for run in range(200):
    r, w = os.pipe()
    got = []
    def read():
        buf = b""
        while True:
            data = os.read(r, 1 << 16)
            if not data:
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                f = json.loads(line)
                if f["event"] == "stream":
                    assert len(f["text"]) <= _frames.STREAM_CHUNK, len(f["text"])
                    got.append(("stream", f["id"], f["name"], f["text"]))
                else:
                    got.append((f["event"], f["id"]))
    reader = threading.Thread(target=read)
    reader.start()
    wr = _frames.Writer(w, FakeKernel())
    want = []
    for step in range(rng.randint(1, 60)):
        kind = rng.random()
        if kind < 0.8:
            owner = rng.choice(["c1", "c2", ""])
            name = rng.choice(["stdout", "stderr"])
            size = rng.choice([0, 1, 5, 100, 4000, 70000, _frames.STREAM_CHUNK + 3])
            unit = "".join(rng.choice("ab\\nc\u00e9\u4e2d") for _ in range(17)) + str(step)
            text = (unit * (size // len(unit) + 1))[:size] or "x"
            want.append(("stream", owner, name, text))
            i = 0
            while i < len(text):
                j = min(len(text), i + rng.choice([1, 7, 300, 100000]))
                assert wr.stream(owner, name, text[i:j])
                i = j
        elif kind < 0.95:
            fid = "f%d" % step
            want.append(("display", fid))
            assert wr.frame("display", fid, (("data", {}),))
        else:
            time.sleep(rng.choice([0, 0.001, 0.003]))
    if rng.random() < 0.5:
        time.sleep(0.01)  # the flusher sends what is pending
    wr.flush()
    os.close(w)
    reader.join()
    os.close(r)
    assert merged(got) == merged(want), (run, merged(got)[:3], merged(want)[:3])
print("ok")
`
