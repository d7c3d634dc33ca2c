package gate

import (
	"os"
	"os/exec"
	"reflect"
	"testing"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/protocol"
)

// stubFrames writes frames the way the kernel stub does: json.dumps of a dict with
// event and id first, in both styles the stub might use (default separators with
// ensure_ascii, and compact UTF-8), plus the oversized lines a misbehaving cell makes.
const stubFrames = `
import json, sys
out = sys.stdout
def w(obj, **kw):
    out.write(json.dumps(obj, **kw) + "\n")
compact = dict(ensure_ascii=False, separators=(",", ":"))
w({"event": "hello", "id": "", "protocol": 1, "pid": 7, "pgid": 7, "python": "3.11.7", "bundle": "0" * 64})
w({"event": "stream", "id": "c1", "name": "stdout", "text": "h\u00e9llo\n\"quoted\"\t\u2028 \U0001F600"})
w({"event": "host_request", "id": "h1", "type": "fs.read", "cell": "c1", "args": {"path": "/w/a"}}, **compact)
w({"event": "host_request", "id": "h1", "type": "fs.read", "cell": "c1", "args": {}})
w({"event": "host_request", "id": "h2", "type": "fs.delete", "cell": "c1", "args": {}})
w({"event": "host_request", "id": "h3", "cell": "c1", "args": {}})
w({"event": "host_request", "id": "h\u00e9\U0001F600", "type": "rlm.run", "cell": "c1", "args": {}})
big = "x" * (32 << 20)
w({"event": "host_request", "id": "h4", "type": "fs.write", "cell": "c1", "args": {"data": big}})
w({"event": "stream", "id": "c1", "name": "stdout", "text": big}, **compact)
w({"event": "display", "id": "c1", "data": {"text/plain": "<Figure>"}})
w({"event": "done", "id": "c1", "status": "ok", "result": "42", "error": None}, **compact)
out.flush()
`

// TestGateReadsARealPythonKernelsFrames pipes frames written by a real Python process
// through the gate, and decodes what it lets through with the protocol package.
func TestGateReadsARealPythonKernelsFrames(t *testing.T) {
	if testing.Short() {
		t.Skip("writes two 32 MiB lines; run without -short")
	}
	cmd := exec.Command(testneed.Python(t), "-I", "-c", stubFrames)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rec, err := runGate(t, defaultLimits(), serves, stdout)
	if werr := cmd.Wait(); werr != nil {
		t.Fatalf("python: %v", werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i := range rec.outs {
		rec.outs[i].Len = 0
	}
	want := []Outcome{
		{Kind: "event", Event: "hello"},
		{Kind: "event", Event: "stream", ID: "c1"},
		{Kind: "run", ID: "h1", Type: "fs.read"},
		refused("h1", protocol.CodeDuplicate), {Kind: "diag"},
		refused("h2", protocol.CodeUnserved),
		refused("h3", protocol.CodeNoType),
		{Kind: "run", ID: "hé😀", Type: "rlm.run"},
		refused("h4", protocol.CodeTooLarge),
		{Kind: "diag"},
		{Kind: "event", Event: "display", ID: "c1"},
		{Kind: "event", Event: "done", ID: "c1"},
	}
	if !reflect.DeepEqual(rec.outs, want) {
		t.Fatalf("%v\nwant %v", rec.outs, want)
	}
	// Everything let through decodes, and the text survived the trip exactly.
	for _, line := range rec.lines {
		if _, err := protocol.DecodeEvent(line); err != nil {
			t.Errorf("%s: %v", line, err)
		}
	}
	s, err := protocol.DecodeStream(rec.lines[1])
	if err != nil || s.Text != "héllo\n\"quoted\"\t\u2028 😀" {
		t.Errorf("stream text %q, %v", s.Text, err)
	}
}
