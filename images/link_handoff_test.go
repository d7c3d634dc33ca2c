package images

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// attachAs dials and attaches as controller instance name (attach's "controller").
func (k *detached) attachAs(ack uint64, grace float64, name string) (*lconn, map[string]any) {
	k.t.Helper()
	return k.attachWith(ack, grace, map[string]any{"controller": name})
}

// attachWith dials and attaches with extra attach fields.
func (k *detached) attachWith(ack uint64, grace float64, extra map[string]any) (*lconn, map[string]any) {
	k.t.Helper()
	c := k.dial()
	a := map[string]any{"kernel": k.id, "token": k.token, "ack": ack, "grace": grace}
	for key, v := range extra {
		a[key] = v
	}
	b, _ := json.Marshal(map[string]any{"attach": a})
	c.write(string(b) + "\n")
	line, err := c.line()
	if err != nil {
		k.t.Fatalf("no answer to the attach: %v", err)
	}
	var v map[string]map[string]any
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || v["hello"] == nil {
		k.t.Fatalf("answer to the attach is no hello: %q (%v)", line, err)
	}
	return c, v["hello"]
}

// hostCallCell asks the host for "slow" and prints how it ended.
const hostCallCell = `import kennel
try:
    print("result", kennel.host_request("slow", n=1))
except kennel.HostError as e:
    print("code", e.code)
`

// TestDetachedAnotherControllersHostRequestIsAnsweredUnknown: a host request the
// controller that received it never answered (it was replaced) fails in its cell with
// code unknown when another controller attaches, whether that one acknowledged the
// request's frame or not, and the frame is never delivered to the new controller: the
// request runs at most once. The same controller reattaching keeps it waiting (its reply
// then settles it: the conformance suite's host call across a cut).
func TestDetachedAnotherControllersHostRequestIsAnsweredUnknown(t *testing.T) {
	t.Parallel()
	for _, acked := range []bool{true, false} {
		name := map[bool]string{true: "acknowledged", false: "unacknowledged"}[acked]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			k := startDetached(t, detachedOpts{})
			a, _ := k.attachAs(0, 60, "ctl-a")
			s := &stream{t: t}
			a.send(1, 0, hostFrame("execute", "c1", "code", hostCallCell))
			req := s.until(a, func(f frame) bool { return f.Event == "host_request" })
			before := s.last
			if !acked {
				before = 0 // nothing acknowledged: the kernel would resend everything it holds
			} else {
				a.write(`{"ack":` + jsonNum(s.last) + "}\n")
			}
			// The same controller reattaching after a cut: the request waits on.
			a2, _ := k.attachAs(before, 60, "ctl-a")
			if !a.closed() {
				t.Fatal("the older connection stayed open")
			}
			if !acked {
				// It comes again (the frames the kernel holds, from seq 1).
				var got bool
				for !got {
					e := a2.next()
					got = e.Seq != 0 && e.Frame.Event == "host_request" && e.Frame.ID == req.ID
				}
			}
			// Another controller: the request is answered unknown in the cell, and its
			// frame never comes.
			b, hello := k.attachAs(before, 60, "ctl-b")
			next := uint64(hnum(t, hello, "ack")) // the controller's seqs go on from the kernel's ack
			if !a2.closed() {
				t.Fatal("the second connection stayed open")
			}
			var out strings.Builder
			for {
				e := b.next()
				if e.Seq == 0 {
					continue
				}
				f := e.Frame
				if f.Event == "host_request" {
					t.Fatalf("the new controller got the request %s the earlier one took: %s", f.ID, f)
				}
				if f.Event == "stream" && f.ID == "c1" {
					out.WriteString(f.str("text"))
				}
				if f.Event == "done" && f.ID == "c1" {
					break
				}
			}
			if out.String() != "code unknown\n" {
				t.Errorf("cell output %q, want the request failed with code unknown", out.String())
			}
			eventually(t, "kernel.log says which requests were answered unknown", func() bool {
				return strings.Contains(k.log(), "host requests "+req.ID+" answered unknown")
			})
			// The kernel serves the new controller's requests as ever.
			b.send(next+1, 0, hostFrame("execute", "c2", "code", hostCallCell))
			var req2 frame
			for {
				e := b.next()
				if e.Seq != 0 && e.Frame.Event == "host_request" {
					req2 = e.Frame
					break
				}
			}
			if req2.ID == req.ID {
				t.Fatalf("request id %s reused", req2.ID)
			}
			b.send(next+2, 0, hostFrame("host_reply", req2.ID, "status", "ok", "result", 42))
			out.Reset()
			for {
				e := b.next()
				if e.Seq == 0 {
					continue
				}
				if e.Frame.Event == "stream" && e.Frame.ID == "c2" {
					out.WriteString(e.Frame.str("text"))
				}
				if e.Frame.Event == "done" && e.Frame.ID == "c2" {
					break
				}
			}
			if out.String() != "result 42\n" {
				t.Errorf("second cell output %q", out.String())
			}
		})
	}
}

func jsonNum(n uint64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
