package gate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/kennel-dev/kennel/protocol"
)

var small = limits{maxLine: 256, headSize: 128, idsKept: 4}

func req(id, typ string) string {
	return fmt.Sprintf(`{"event":"host_request","id":%q,"type":%q,"cell":"c1","args":{}}`+"\n", id, typ)
}

func run(id, typ string, line string) Outcome {
	return Outcome{Kind: "run", ID: id, Type: typ, Len: len(line) - 1}
}

func refused(id string, code protocol.Code) Outcome {
	st := protocol.StatusError
	if code == protocol.CodeDuplicate {
		st = protocol.StatusDuplicate
	}
	return Outcome{Kind: "refuse", ID: id, Status: st, Code: code}
}

func runAll(t *testing.T, lim limits, input string) ([]Outcome, error) {
	t.Helper()
	rec, err := runGate(t, lim, serves, strings.NewReader(input))
	return rec.outs, err
}

func TestFaultsAreTypedAndStopTheGate(t *testing.T) {
	good := req("a", "fs.read")
	after := req("z", "fs.read")
	tests := []struct {
		name, line, reason string
	}{
		{"non-UTF-8 in a string", "{\"event\":\"stream\",\"id\":\"a\",\"text\":\"\xff\"}\n", reasonUTF8},
		{"non-UTF-8 outside strings", "{\"event\":\"stream\",\"id\":\"a\"}\xc3\n", reasonUTF8},
		{"non-JSON", "Traceback (most recent call last):\n", reasonNotObject},
		{"JSON array", `[{"event":"stream","id":"a"}]` + "\n", reasonNotObject},
		{"JSON string", `"event"` + "\n", reasonNotObject},
		{"trailing data", `{"event":"stream","id":"a"} {}` + "\n", reasonNotObject},
		{"missing event", `{"id":"a","event":"stream"}` + "\n", whyNoEvent},
		{"event not a string", `{"event":1,"id":"a"}` + "\n", whyNoEvent},
		{"no id", `{"event":"stream","text":"x"}` + "\n", whyNoID},
		{"id not a string", `{"event":"host_request","id":7,"type":"fs.read"}` + "\n", whyNoID},
		{"id past the head", `{"event":"host_request","id":"` + strings.Repeat("i", 150) + `","type":"fs.read"}` + "\n", whyNoID},
		{"empty line", "\n", reasonEmpty},
		{"blank line", " \t\r\n", reasonNotObject},
		{"key twice", `{"event":"stream","id":"a","event":"host_request"}` + "\n", reasonDupKey},
		{"escaped key twice", `{"event":"host_request","id":"a","type":"x","t\u0079pe":"fs.read"}` + "\n", reasonDupKey},
		{"too deep", `{"event":"log","id":"","a":` + strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth) + "}\n", reasonDepth},
		{"oversized headerless", strings.Repeat("A", 1000) + "\n", reasonOversized},
		{"oversized done", `{"event":"done","id":"c1","result":"` + strings.Repeat("x", 300) + `"}` + "\n", reasonOversized},
		{"oversized without id", `{"event":"host_request","type":"fs.read","x":"` + strings.Repeat("x", 300) + `"}` + "\n", reasonOversized},
		{"oversized non-UTF-8 id", "{\"event\":\"host_request\",\"id\":\"\xff\",\"x\":\"" + strings.Repeat("x", 300) + "\"}\n", reasonOversized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lim := small
			if tt.name == "too deep" {
				lim.maxLine = 1 << 20
			}
			outs, err := runAll(t, lim, good+tt.line+after)
			var fault *ProtocolFault
			if !errors.As(err, &fault) || !errors.Is(err, ErrProtocolFault) {
				t.Fatalf("err = %v, want a *ProtocolFault", err)
			}
			if fault.Reason != tt.reason {
				t.Errorf("reason %q, want %q", fault.Reason, tt.reason)
			}
			if fault.Offset != int64(len(good)) {
				t.Errorf("offset %d, want %d", fault.Offset, len(good))
			}
			bad := strings.TrimSuffix(tt.line, "\n")
			if want := bad[:min(len(bad), maxFaultHead)]; string(fault.Head) != want {
				t.Errorf("head %q, want %q", fault.Head, want)
			}
			if !strings.Contains(fault.Error(), tt.reason) || !strings.Contains(fault.Error(), fmt.Sprint(fault.Offset)) {
				t.Errorf("Error() = %q: no reason or offset", fault.Error())
			}
			// The line before was decided; nothing at or after the fault was.
			if want := []Outcome{run("a", "fs.read", good), {Kind: "fault"}}; !reflect.DeepEqual(outs, want) {
				t.Errorf("outcomes %v, want %v", outs, want)
			}
		})
	}
}

func TestCutLinesAtEOFAreFaults(t *testing.T) {
	good := req("a", "fs.read")
	for name, tail := range map[string]string{
		"short":     `{"event":"stream","id":"a","name":"stdout","text":"hi"}`,
		"oversized": `{"event":"stream","id":"a","name":"stdout","text":"` + strings.Repeat("x", 1000),
	} {
		outs, err := runAll(t, small, good+tail)
		var fault *ProtocolFault
		if !errors.As(err, &fault) || fault.Reason != reasonCut || fault.Offset != int64(len(good)) {
			t.Errorf("%s: err = %v, want a cut-line fault at %d", name, err, len(good))
			continue
		}
		if !bytes.HasPrefix([]byte(tail), fault.Head) || len(fault.Head) == 0 {
			t.Errorf("%s: head %q", name, fault.Head)
		}
		want := []Outcome{run("a", "fs.read", good)}
		if name == "oversized" {
			want = append(want, Outcome{Kind: "diag"}) // decided on at the limit, then cut
		}
		if want = append(want, Outcome{Kind: "fault"}); !reflect.DeepEqual(outs, want) {
			t.Errorf("%s: outcomes %v, want %v", name, outs, want)
		}
	}
	// A stream that ends after a newline is not cut; an empty stream neither.
	for _, in := range []string{"", req("a", "fs.read")} {
		if _, err := runAll(t, small, in); err != nil {
			t.Errorf("%q: %v", in, err)
		}
	}
}

func TestHeadRules(t *testing.T) {
	long := strings.Repeat("p", 120)
	tests := []struct {
		name, line string
		want       Outcome
	}{
		{"whitespace between tokens", ` { "event" : "host_request" ,	"id" : "a" , "type" : "fs.read" , "args" : { } } `,
			Outcome{Kind: "run", ID: "a", Type: "fs.read"}},
		{"escapes in keys and values", `{"\u0065vent":"host_\u0072equest","\u0069d":"\ud83d\ude00\"","t\u0079pe":"fs.r\u0065ad"}`,
			Outcome{Kind: "run", ID: "😀\"", Type: "fs.read"}},
		{"lone surrogate id, as encoding/json reads it", `{"event":"host_request","id":"\ud800x","type":"fs.read"}`,
			Outcome{Kind: "run", ID: "\ufffdx", Type: "fs.read"}},
		{"type null", `{"event":"host_request","id":"a","type":null}`, refused("a", protocol.CodeNoType)},
		{"type a number", `{"event":"host_request","id":"a","type":3}`, refused("a", protocol.CodeNoType)},
		{"type fourth", `{"event":"host_request","id":"a","cell":"c1","type":"fs.read"}`, refused("a", protocol.CodeNoType)},
		{"type absent", `{"event":"host_request","id":"a"}`, refused("a", protocol.CodeNoType)},
		{"type past the head", `{"event":"host_request","id":"a","type":"` + long + `"}`, refused("a", protocol.CodeNoType)},
		{"type unserved", `{"event":"host_request","id":"a","type":"fs.delete"}`, refused("a", protocol.CodeUnserved)},
		{"type differs in case", `{"event":"host_request","id":"a","type":"FS.read"}`, refused("a", protocol.CodeUnserved)},
		{"unknown event", `{"event":"mystery","id":"m1"}`, Outcome{Kind: "event", Event: "mystery", ID: "m1"}},
		{"event with escaped id", `{"event":"stream","id":"c\u0031","name":"stdout","text":""}`, Outcome{Kind: "event", Event: "stream", ID: "c1"}},
	}
	for _, tt := range tests {
		outs, err := runAll(t, small, tt.line+"\n")
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if tt.want.Kind == "run" || tt.want.Kind == "event" {
			tt.want.Len = len(tt.line)
		}
		if !reflect.DeepEqual(outs, []Outcome{tt.want}) {
			t.Errorf("%s: %v, want %v", tt.name, outs, tt.want)
		}
	}
}

// The reference's a_repeated_id_of_a_request_in_flight_gets_a_duplicate_reply_and_no_handler.
func TestARepeatedIDOfARequestInFlightGetsADuplicateReplyAndNoHandler(t *testing.T) {
	first := req("h1", "rlm.run")
	var diags []string
	var outs []Outcome
	g := New(Config{
		Serves:    serves,
		OnRequest: func(r Request) { outs = append(outs, Outcome{Kind: "run", ID: r.ID, Type: r.Type, Len: len(r.Line)}) },
		OnRefusal: func(r Refusal) {
			outs = append(outs, Outcome{Kind: "refuse", ID: r.ID, Status: r.Status, Code: r.Code})
		},
		OnDiagnostic: func(m string) { diags = append(diags, m) },
	})
	if err := g.Run(context.Background(), strings.NewReader(first+req("h1", "fs.read"))); err != nil {
		t.Fatal(err)
	}
	want := []Outcome{run("h1", "rlm.run", first), refused("h1", protocol.CodeDuplicate)}
	if !reflect.DeepEqual(outs, want) {
		t.Fatalf("%v, want %v", outs, want)
	}
	if len(diags) != 1 || !strings.Contains(diags[0], `"h1"`) {
		t.Fatalf("diagnostics %q, want one naming h1", diags)
	}
}

// TestDuplicateComesFirst: an id in use gets "duplicate" whatever else is wrong with the
// request, since an "error" reply would settle the request in flight.
func TestDuplicateComesFirst(t *testing.T) {
	first := req("h1", "fs.read")
	for name, second := range map[string]string{
		"unserved":  req("h1", "fs.delete"),
		"no type":   `{"event":"host_request","id":"h1"}` + "\n",
		"too large": `{"event":"host_request","id":"h1","type":"fs.read","args":"` + strings.Repeat("x", 400) + `"}` + "\n",
	} {
		outs, err := runAll(t, small, first+second)
		want := []Outcome{run("h1", "fs.read", first), refused("h1", protocol.CodeDuplicate), {Kind: "diag"}}
		if err != nil || !reflect.DeepEqual(outs, want) {
			t.Errorf("%s: %v, %v; want %v", name, outs, err, want)
		}
	}
}

// TestARefusedIDIsNotInUse: only accepted ids are in use; a refused request ran nothing
// and its reply settled it, so its id may come again.
func TestARefusedIDIsNotInUse(t *testing.T) {
	again := req("h1", "fs.read")
	for name, first := range map[string]string{
		"unserved":  req("h1", "fs.delete"),
		"no type":   `{"event":"host_request","id":"h1"}` + "\n",
		"too large": `{"event":"host_request","id":"h1","type":"fs.read","args":"` + strings.Repeat("x", 400) + `"}` + "\n",
	} {
		outs, err := runAll(t, small, first+again)
		if err != nil || len(outs) != 2 || outs[0].Kind != "refuse" || !reflect.DeepEqual(outs[1], run("h1", "fs.read", again)) {
			t.Errorf("%s: %v, %v; want a refusal, then h1 run", name, outs, err)
		}
	}
}

// TestTheNewest1024IDsAreKept: with the protocol's limits, an id stays in use through
// 1023 newer accepted ids and is free again after the 1024th.
func TestTheNewest1024IDsAreKept(t *testing.T) {
	var in strings.Builder
	for i := range protocol.IDsKept {
		in.WriteString(req(fmt.Sprint("h", i), "fs.read"))
	}
	in.WriteString(req("h0", "fs.read"))                              // still in use
	in.WriteString(req(fmt.Sprint("h", protocol.IDsKept), "fs.read")) // evicts h0
	in.WriteString(req("h0", "fs.read"))                              // free again
	in.WriteString(req("h5", "fs.read"))                              // still in use
	in.WriteString(req("h1", "fs.read"))                              // evicted when h0 came back
	outs, err := runAll(t, defaultLimits(), in.String())
	if err != nil {
		t.Fatal(err)
	}
	tail := outs[protocol.IDsKept:]
	kinds := []string{}
	for _, o := range tail {
		kinds = append(kinds, o.Kind+" "+o.ID)
	}
	want := []string{"refuse h0", "diag ", fmt.Sprint("run h", protocol.IDsKept), "run h0", "refuse h5", "diag ", "run h1"}
	if !reflect.DeepEqual(kinds, want) {
		t.Fatalf("%v, want %v", kinds, want)
	}
}

// TestLinesAreWholeDuringTheCallbackAndIDsKeep: a request's and an event's Line is the
// whole line during its callback (read in small chunks, so lines span reads); the ID
// strings handed out stay unchanged while the gate goes on reading thousands of lines
// over the same buffer and id arena.
func TestLinesAreWholeDuringTheCallbackAndIDsKeep(t *testing.T) {
	var lines []string
	for i := range 3 * arenaBlock / 8 {
		lines = append(lines, req(fmt.Sprintf("id-%d", i), "fs.read"))
		if i%5 == 0 {
			lines = append(lines, fmt.Sprintf(`{"event":"stream","id":"c%d","name":"stdout","text":"x"}`+"\n", i))
		}
	}
	lines = append(lines, req(strings.Repeat("L", arenaMaxID+1), "fs.write"), req("", "fs.read"))
	var gotLines []string
	var ids []string
	g := New(Config{
		Serves: serves,
		OnRequest: func(r Request) {
			gotLines = append(gotLines, string(r.Line)+"\n")
			ids = append(ids, r.ID)
		},
		OnEvent: func(f Frame) { gotLines = append(gotLines, string(f.Line)+"\n") },
	})
	if err := g.Run(context.Background(), &chunkReader{data: []byte(strings.Join(lines, "")), sizes: []int{7, 300, 5000}}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotLines, lines) {
		t.Fatalf("lines differ: got %d, want %d", len(gotLines), len(lines))
	}
	wantIDs := []string{}
	for _, l := range lines {
		var r struct{ Event, ID string }
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if r.Event == "host_request" {
			wantIDs = append(wantIDs, r.ID)
		}
	}
	if !reflect.DeepEqual(ids, wantIDs) {
		t.Fatal("an ID handed out changed later")
	}
}

// TestAcceptingAllocatesNothingPerRequest: a run of accepted requests allocates about
// one arena block per arenaBlock bytes of ids, not a string or a line per request.
func TestAcceptingAllocatesNothingPerRequest(t *testing.T) {
	const n = 20000
	data, _ := requestFrames(n)
	allocs := testing.AllocsPerRun(3, func() {
		g := New(Config{Serves: serves, OnRequest: func(Request) {}})
		if err := g.Run(context.Background(), bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	})
	// Per run: the gate and its tables, the read buffer, and n*7/arenaBlock blocks.
	if limit := float64(20 + n*7/arenaBlock); allocs > limit {
		t.Fatalf("%v allocations for %d requests, want at most %v", allocs, n, limit)
	}
}

func TestNilCallbacks(t *testing.T) {
	in := req("a", "fs.read") + `{"event":"stream","id":"c1","name":"stdout","text":"x"}` + "\n"
	if err := New(Config{}).Run(context.Background(), strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	// Without OnRequest nothing is served, whatever Serves says: every request is refused.
	var got []Refusal
	g := New(Config{Serves: serves, OnRefusal: func(r Refusal) { got = append(got, r) }})
	if err := g.Run(context.Background(), strings.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Code != protocol.CodeUnserved || got[0].ID != "a" {
		t.Fatalf("refusals %+v", got)
	}
}

func TestRunIsSingleUse(t *testing.T) {
	g := New(Config{})
	if err := g.Run(context.Background(), strings.NewReader("")); err != nil {
		t.Fatal(err)
	}
	if err := g.Run(context.Background(), strings.NewReader("")); !errors.Is(err, ErrReused) {
		t.Fatalf("second Run: %v, want ErrReused", err)
	}
}

type failingReader struct {
	data []byte
	err  error
}

// Read returns the last of the data together with the error, as io.Reader allows.
func (f *failingReader) Read(p []byte) (int, error) {
	n := copy(p, f.data)
	f.data = f.data[n:]
	if len(f.data) == 0 {
		return n, f.err
	}
	return n, nil
}

func TestReadErrorsAreReturned(t *testing.T) {
	boom := errors.New("pipe broke")
	rec := &recorder{}
	g := newGate(rec.config(serves), small)
	err := g.Run(context.Background(), &failingReader{data: []byte(req("a", "fs.read") + `{"event":`), err: boom})
	if !errors.Is(err, boom) || isFault(err) {
		t.Fatalf("err = %v, want the read error", err)
	}
	if len(rec.outs) != 1 || rec.outs[0].Kind != "run" {
		t.Fatalf("outcomes %v: the complete line should be decided", rec.outs)
	}
}

func TestNoProgress(t *testing.T) {
	err := New(Config{}).Run(context.Background(), &chunkReader{data: []byte("x"), sizes: []int{0}})
	if !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("err = %v, want io.ErrNoProgress", err)
	}
}

// cancelReader cancels its context on the first read, then serves data.
type cancelReader struct {
	cancel func(error)
	data   []byte
}

func (c *cancelReader) Read(p []byte) (int, error) {
	c.cancel(errSessionClosed)
	n := copy(p, c.data)
	c.data = c.data[n:]
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

var errSessionClosed = errors.New("session closed")

func TestContextEndsRun(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	rec := &recorder{}
	g := newGate(rec.config(serves), small)
	err := g.Run(ctx, &cancelReader{cancel: cancel, data: []byte(req("a", "fs.read") + req("b", "fs.read"))})
	if !errors.Is(err, errSessionClosed) {
		t.Fatalf("err = %v, want the context's cause", err)
	}
	// Lines already read are decided before the context is checked.
	if len(rec.outs) != 2 {
		t.Fatalf("outcomes %v", rec.outs)
	}
}

// genReader serves head, then n bytes of fill, then tail, without holding the fill.
type genReader struct {
	head, tail []byte
	n          int
}

func (g *genReader) Read(p []byte) (int, error) {
	switch {
	case len(g.head) > 0:
		n := copy(p, g.head)
		g.head = g.head[n:]
		return n, nil
	case g.n > 0:
		n := min(len(p), g.n, len(fill))
		copy(p, fill[:n])
		g.n -= n
		return n, nil
	case len(g.tail) > 0:
		n := copy(p, g.tail)
		g.tail = g.tail[n:]
		return n, nil
	}
	return 0, io.EOF
}

var fill = bytes.Repeat([]byte("x"), 64<<10)

// allocated returns the bytes allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestAnOversizedLineIsNotBuffered: past the limit the gate reads a line through its
// buffer without keeping it: 64 MiB over a 1 KiB limit allocate well under 1 MiB.
func TestAnOversizedLineIsNotBuffered(t *testing.T) {
	lim := limits{maxLine: 1 << 10, headSize: 256, idsKept: 8}
	for _, ev := range []string{"host_request", "stream"} {
		var outs []Outcome
		var err error
		n := allocated(func() {
			rec := &recorder{}
			g := newGate(rec.config(serves), lim)
			err = g.Run(context.Background(), &genReader{
				head: []byte(`{"event":"` + ev + `","id":"big","type":"fs.read","args":{"data":"`),
				n:    64 << 20,
				tail: []byte(`"}}` + "\n" + req("next", "fs.read")),
			})
			outs = rec.outs
		})
		if err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
		want := []Outcome{refused("big", protocol.CodeTooLarge), run("next", "fs.read", req("next", "fs.read"))}
		if ev == "stream" {
			want[0] = Outcome{Kind: "diag"}
		}
		if !reflect.DeepEqual(outs, want) {
			t.Fatalf("%s: %v, want %v", ev, outs, want)
		}
		if n > 1<<20 {
			t.Fatalf("%s: %d bytes allocated for a 64 MiB line over a 1 KiB limit", ev, n)
		}
	}
}
