package gate

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/kennel-dev/kennel/protocol"
)

// Outcome is one observable decision of the gate: what the model predicts and what the
// callbacks record.
type Outcome struct {
	Kind   string // "run", "refuse", "event", "diag" or "fault"
	ID     string
	Type   string // run: the request type
	Event  string // event: the event name
	Status protocol.ReplyStatus
	Code   protocol.Code
	Len    int // run, event: the line's length without its newline
}

func (o Outcome) String() string {
	switch o.Kind {
	case "run":
		return fmt.Sprintf("run(%q %s %dB)", o.ID, o.Type, o.Len)
	case "refuse":
		return fmt.Sprintf("refuse(%q %s %s)", o.ID, o.Status, o.Code)
	case "event":
		return fmt.Sprintf("event(%s %q %dB)", o.Event, o.ID, o.Len)
	}
	return o.Kind
}

// recorder turns the gate's callbacks into Outcomes.
type recorder struct {
	outs  []Outcome
	lines [][]byte // the line of each run and event, copied
}

func (r *recorder) config(served func(string) bool) Config {
	return Config{
		Serves: served,
		OnRequest: func(q Request) {
			r.outs = append(r.outs, Outcome{Kind: "run", ID: q.ID, Type: q.Type, Len: len(q.Line)})
			r.lines = append(r.lines, append([]byte(nil), q.Line...)) // borrowed: copy
		},
		OnRefusal: func(f Refusal) {
			r.outs = append(r.outs, Outcome{Kind: "refuse", ID: f.ID, Status: f.Status, Code: f.Code})
		},
		OnEvent: func(f Frame) {
			r.outs = append(r.outs, Outcome{Kind: "event", ID: f.ID, Event: f.Event, Len: len(f.Line)})
			r.lines = append(r.lines, append([]byte(nil), f.Line...))
		},
		OnDiagnostic: func(string) { r.outs = append(r.outs, Outcome{Kind: "diag"}) },
	}
}

// runGate runs a gate with lim over r and returns its outcomes, a fault appended as one.
func runGate(t interface{ Helper() }, lim limits, served func(string) bool, r io.Reader) (*recorder, error) {
	t.Helper()
	rec := &recorder{}
	g := newGate(rec.config(served), lim)
	err := g.Run(context.Background(), r)
	var fault *ProtocolFault
	if errors.As(err, &fault) {
		rec.outs = append(rec.outs, Outcome{Kind: "fault"})
	}
	return rec, err
}

// chunkReader serves data in reads of the given sizes, cycled; a size 0 is an empty read.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = c.sizes[c.i%len(c.sizes)]
		c.i++
	}
	n = min(n, len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	if len(c.data) == 0 && c.i%2 == 0 {
		return n, io.EOF // the last bytes with EOF, as io.Reader allows, half the time
	}
	return n, nil
}

var servedTypes = map[string]bool{"fs.read": true, "fs.write": true, "rlm.run": true}

func serves(typ string) bool { return servedTypes[typ] }

func isFault(err error) bool {
	var fault *ProtocolFault
	return errors.As(err, &fault) && errors.Is(err, ErrProtocolFault)
}
